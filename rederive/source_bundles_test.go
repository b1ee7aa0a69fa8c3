package rederive_test

// The remote ledger's bulk read: entry bundles and payload bundles, proven
// by the tiles, against a real server of 5,000 entries (19 full bundles
// and a partial one of 136), through proxies that lie in the bundles, past
// the boundaries of a bundle (255/256), a read batch (1,023/1,024) and the
// partial last bundle; and the verified cache of bundles (--cache-dir).

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/bundletest"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

const noPayload = 1<<32 - 1

// splitPayloads splits a payload bundle; nil stands for a pruned marker.
func splitPayloads(t *testing.T, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		l := binary.BigEndian.Uint32(b)
		b = b[4:]
		if l == noPayload {
			out = append(out, nil)
			continue
		}
		out = append(out, b[:l])
		b = b[l:]
	}
	return out
}

// joinPayloads is the inverse of splitPayloads.
func joinPayloads(ps [][]byte) []byte {
	var b []byte
	for _, p := range ps {
		if p == nil {
			b = binary.BigEndian.AppendUint32(b, noPayload)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// editPayload rewrites entry i of the payload bundle at path with edit.
func editPayload(t *testing.T, i int, edit func([]byte) []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		ps := splitPayloads(t, b)
		ps[i] = edit(append([]byte(nil), ps[i]...))
		return joinPayloads(ps)
	}
}

// get fetches upstream+path, for a proxy that serves another resource's
// bytes.
func get(t *testing.T, u string) []byte {
	resp, err := http.Get(u)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// readAll reads [0, remoteTestEntries) in fold batches of 1,024,
// concurrently, and returns the number of records read.
func readAll(t *testing.T, r fold.LogReader) {
	t.Helper()
	var wg sync.WaitGroup
	for from := uint64(0); from < remoteTestEntries; from += 1024 {
		wg.Go(func() {
			to := min(from+1024, remoteTestEntries)
			got, err := readRange(r, from, to)
			if err != nil || uint64(len(got)) != to-from {
				t.Errorf("Entries(%d, %d): %d records, %v", from, to, len(got), err)
				return
			}
			for i, rec := range got {
				if want := fmt.Sprintf(`{"n":%d}`, from+uint64(i)); string(rec.Payload) != want || rec.PayloadPruned {
					t.Errorf("entry %d: payload %q (pruned %v), want %s", rec.Index, rec.Payload, rec.PayloadPruned, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestRemoteLogBundles(t *testing.T) {
	s := newRemoteTestServer(t)
	const p = "/v1/logs/payments/"

	// counted serves upstream (without combined bundles unless combined),
	// counting the requests by kind.
	counted := func(t *testing.T, upstream string, combined bool) (string, func() map[string]int) {
		h := bundletest.NoCombined(upstream)
		if combined {
			h = bundletest.Proxy(upstream)
		}
		var mu sync.Mutex
		count := map[string]int{}
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			kind := r.URL.Path
			for _, pre := range []string{p + "bundles/", p + "tile/entries/", p + "payloads/", p + "tile/0/", p + "tile/1/"} {
				if strings.HasPrefix(kind, pre) {
					kind = pre
				}
			}
			mu.Lock()
			count[kind]++
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		return front.URL, func() map[string]int { mu.Lock(); defer mu.Unlock(); return maps.Clone(count) }
	}
	t.Run("honest server", func(t *testing.T) {
		// Every entry read from the combined bundles: the full ones of
		// each 1,024-entry read in one request (4 reads of 4, one of 3),
		// the partial last one alone; the level-1 tile and the partial
		// level-0 tile; no entry or payload bundle apart, no JSON
		// listing, no proof.
		url, count := counted(t, s.url, true)
		rl, pin := s.ledger(t, url, 0)
		readAll(t, rl.Reader("payments", pin))
		want := map[string]int{p + "bundles/": 6, p + "tile/0/": 1, p + "tile/1/": 1, p + "checkpoint": 1}
		if got := count(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("requests %v, want %v", got, want)
		}
	})
	t.Run("honest server without combined bundles", func(t *testing.T) {
		// An auditd from before combined bundles: 20 entry and 20
		// payload bundles, after the first 404s for combined ones.
		url, count := counted(t, s.url, false)
		rl, pin := s.ledger(t, url, 0)
		readAll(t, rl.Reader("payments", pin))
		got := count()
		if n := got[p+"bundles/"]; n < 1 || n > 20 {
			t.Errorf("%d combined bundles asked for, want 1 to 20 (those in flight before the first 404)", n)
		}
		delete(got, p+"bundles/")
		want := map[string]int{p + "tile/entries/": 20, p + "payloads/": 20, p + "tile/0/": 1, p + "tile/1/": 1, p + "checkpoint": 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("requests %v, want %v", got, want)
		}
	})

	n := func(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }
	lies := []struct {
		name string
		// edit rewrites the answer to path (nil: leave it).
		edit      func(path string, body []byte) []byte
		bad, good [][2]uint64
	}{
		{"payload byte flipped (entry 300)", func(path string, b []byte) []byte {
			if path != p+"payloads/001" {
				return nil
			}
			return editPayload(t, 44, func(v []byte) []byte { v[2] ^= 1; return v })(b)
		}, // The bundle is proven whole: a read of any of its entries fails.
			[][2]uint64{{256, 512}, {300, 301}, {0, 1024}, {299, 300}}, [][2]uint64{{0, 256}, {512, 1024}}},
		{"payloads of 255 and 256 swapped (bundle edge)", func(path string, b []byte) []byte {
			switch path {
			case p + "payloads/000":
				return editPayload(t, 255, func([]byte) []byte { return n(256) })(b)
			case p + "payloads/001":
				return editPayload(t, 0, func([]byte) []byte { return n(255) })(b)
			}
			return nil
		}, [][2]uint64{{255, 256}, {256, 257}, {0, 1024}, {200, 300}}, [][2]uint64{{1024, 2048}}},
		{"payloads of 1023 and 1024 swapped (batch edge)", func(path string, b []byte) []byte {
			switch path {
			case p + "payloads/003":
				return editPayload(t, 255, func([]byte) []byte { return n(1024) })(b)
			case p + "payloads/004":
				return editPayload(t, 0, func([]byte) []byte { return n(1023) })(b)
			}
			return nil
		}, [][2]uint64{{1023, 1024}, {1024, 1025}, {0, 1024}, {1024, 2048}}, [][2]uint64{{0, 768}, {1280, 2048}}},
		{"payloads swapped within a bundle (10 and 11)", func(path string, b []byte) []byte {
			if path != p+"payloads/000" {
				return nil
			}
			ps := splitPayloads(t, b)
			ps[10], ps[11] = ps[11], ps[10]
			return joinPayloads(ps)
		}, [][2]uint64{{10, 11}, {0, 1024}}, [][2]uint64{{256, 1024}}},
		{"payload byte flipped in the partial last bundle (entry 4999)", func(path string, b []byte) []byte {
			if path != p+"payloads/019.p/136" {
				return nil
			}
			return editPayload(t, 135, func(v []byte) []byte { v[len(v)-2] ^= 1; return v })(b)
		}, [][2]uint64{{4999, 5000}, {4096, 5000}, {4864, 4865}}, [][2]uint64{{4096, 4864}}},
		{"payload bundle truncated", func(path string, b []byte) []byte {
			if path != p+"payloads/002" {
				return nil
			}
			return b[:len(b)-1]
		}, [][2]uint64{{512, 768}, {767, 768}}, [][2]uint64{{0, 512}, {768, 1024}}},
		{"payload bundle with an entry too many", func(path string, b []byte) []byte {
			if path != p+"payloads/002" {
				return nil
			}
			return append(b, joinPayloads([][]byte{n(768)})...)
		}, [][2]uint64{{512, 768}}, [][2]uint64{{768, 1024}}},
		{"entry bundle truncated", func(path string, b []byte) []byte {
			if path != p+"tile/entries/002" {
				return nil
			}
			return b[:len(b)-1]
		}, [][2]uint64{{512, 768}, {600, 601}}, [][2]uint64{{0, 512}}},
		{"payload bundle of the wrong index (4 for 3)", func(path string, b []byte) []byte {
			if path != p+"payloads/003" {
				return nil
			}
			return get(t, s.url+p+"payloads/004")
		}, [][2]uint64{{768, 1024}, {1000, 1001}}, [][2]uint64{{1024, 1280}}},
		{"entry bundle of the wrong index (4 for 3)", func(path string, b []byte) []byte {
			if path != p+"tile/entries/003" {
				return nil
			}
			return get(t, s.url+p+"tile/entries/004")
		}, [][2]uint64{{768, 1024}}, [][2]uint64{{1024, 1280}}},
		{"pruned marker on an unpruned entry (1024)", func(path string, b []byte) []byte {
			if path != p+"payloads/004" {
				return nil
			}
			return editPayload(t, 0, func([]byte) []byte { return nil })(b)
		}, [][2]uint64{{1024, 1025}, {1024, 2048}, {1025, 1280}}, [][2]uint64{{1280, 2048}, {0, 1024}}},
	}
	// Each lie is told in the combined bundles (the proxy joins the parts
	// it lied in) and, to a client of a server without them, in the parts.
	for _, c := range lies {
		for _, mode := range []string{"combined", "apart"} {
			t.Run(c.name+", "+mode, func(t *testing.T) {
				url := tamperingProxy(t, s.url, func(r *http.Request, body []byte) []byte { return c.edit(r.URL.Path, body) })
				if mode == "apart" {
					front := httptest.NewServer(bundletest.NoCombined(url))
					t.Cleanup(front.Close)
					url = front.URL
				}
				rl, pin := s.ledger(t, url, 0)
				r := rl.Reader("payments", pin)
				for _, rg := range c.bad {
					if got, err := readRange(r, rg[0], rg[1]); !errors.Is(err, rederive.ErrVerification) || len(got) != 0 {
						t.Errorf("Entries(%d, %d): %d records, %v; want none and rederive.ErrVerification", rg[0], rg[1], len(got), err)
					}
				}
				for _, rg := range c.good {
					if got, err := readRange(r, rg[0], rg[1]); err != nil || uint64(len(got)) != rg[1]-rg[0] {
						t.Errorf("Entries(%d, %d): %d records, %v; want them all", rg[0], rg[1], len(got), err)
					}
				}
			})
		}
	}

	t.Run("a server without payload bundles", func(t *testing.T) {
		// An auditd from before payload bundles: the entries are read
		// from the JSON listing, still proven by the tiles, and a forged
		// entry there is caught.
		old := noPayloadBundles(t, s.url, false)
		rl, pin := s.ledger(t, old, 0)
		readAll(t, rl.Reader("payments", pin))
		url := tamperingProxy(t, old, forgeRanges(t, 2000))
		rl, pin = s.ledger(t, url, 0)
		if _, err := readRange(rl.Reader("payments", pin), 1500, 2600); !errors.Is(err, rederive.ErrVerification) {
			t.Errorf("Entries(1500, 2600) over a forged JSON entry: %v, want rederive.ErrVerification", err)
		}
	})
	t.Run("payload bundles too large", func(t *testing.T) {
		// A 404 with the watermark header: that page is read as JSON.
		rl, pin := s.ledger(t, noPayloadBundles(t, s.url, true), 0)
		readAll(t, rl.Reader("payments", pin))
	})
}

// noPayloadBundles is a proxy of upstream that answers 404 to payload
// bundles, as an auditd from before them (tooLarge false) or as one for a
// bundle too large to send (true: with the watermark header).
func noPayloadBundles(t *testing.T, upstream string, tooLarge bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/payloads/") || strings.Contains(r.URL.Path, "/bundles/") {
			if tooLarge {
				w.Header().Set("Auditd-Prune-Watermark", "0")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"404 page not found"}`)
			return
		}
		resp, err := http.Get(upstream + r.URL.RequestURI())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRemoteLogBundleCache(t *testing.T) {
	skey, vkey, err := note.GenerateKey(rand.Reader, "rederive-cache-test.example")
	if err != nil {
		t.Fatal(err)
	}
	s := newKeyedTestServer(t, skey, vkey, remoteTestEntries, `{"n":%d}`)
	dir := t.TempDir()
	// run reads every entry through a fresh remote ledger with the cache
	// in dir, and returns the cache's counts and the bundle requests.
	run := func(t *testing.T, url string) (client.CacheStats, int) {
		t.Helper()
		var mu sync.Mutex
		fetched := 0
		proxy := tamperingProxy(t, url, func(r *http.Request, _ []byte) []byte {
			if strings.Contains(r.URL.Path, "/payloads/") {
				mu.Lock()
				fetched++
				mu.Unlock()
			}
			return nil
		})
		cache, err := client.OpenBundleCache(dir)
		if err != nil {
			t.Fatal(err)
		}
		rl, pin := s.ledger(t, proxy, 0)
		rl.Cache = cache
		readAll(t, rl.Reader("payments", pin))
		return cache.Stats(), fetched
	}
	files := func(t *testing.T) []string {
		t.Helper()
		fs, _ := filepath.Glob(filepath.Join(dir, "v1", "*", "*.bundle"))
		return fs
	}

	t.Run("cold, then warm", func(t *testing.T) {
		if st, n := run(t, s.url); st.Hits != 0 || st.Misses != 19 || n != 20 {
			t.Errorf("cold run: %+v, %d payload bundles fetched; want 19 misses and 20 fetched", st, n)
		}
		if fs := files(t); len(fs) != 19 {
			t.Fatalf("%d bundles cached, want the 19 full ones", len(fs))
		}
		if st, n := run(t, s.url); st.Hits != 19 || st.Misses != 0 || st.Bad != 0 || n != 1 {
			t.Errorf("warm run: %+v, %d payload bundles fetched; want 19 hits and only the partial one fetched", st, n)
		}
	})

	// A cache that lost its integrity: each damaged bundle is refetched
	// (the run still reads the true entries), and rewritten.
	damage := []struct {
		name string
		edit func([]byte) []byte
	}{
		{"payload byte flipped", func(b []byte) []byte { b[len(b)-3] ^= 1; return b }},
		{"leaf byte flipped", func(b []byte) []byte { b[4+2+5] ^= 1; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func([]byte) []byte { return nil }},
		{"another bundle's file", func([]byte) []byte {
			b, _ := os.ReadFile(files(t)[0])
			return b
		}},
	}
	for _, c := range damage {
		t.Run("cache "+c.name, func(t *testing.T) {
			fs := files(t)
			f := fs[len(fs)-1]
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, c.edit(b), 0o644); err != nil {
				t.Fatal(err)
			}
			if st, n := run(t, s.url); st.Hits != 18 || st.Bad != 1 || n != 2 {
				t.Errorf("%+v, %d payload bundles fetched; want 18 hits, 1 bad, 2 fetched", st, n)
			}
			if st, n := run(t, s.url); st.Hits != 19 || st.Bad != 0 || n != 1 {
				t.Errorf("after the refetch: %+v, %d fetched; want 19 hits", st, n)
			}
		})
	}

	t.Run("a server with another history", func(t *testing.T) {
		// Same key and log, longer, but its entries differ from those the
		// cache was proven under: the new checkpoint cannot be proven
		// consistent with the cached one, and every read fails.
		other := newKeyedTestServer(t, skey, vkey, remoteTestEntries+100, `{"m":%d}`)
		cache, err := client.OpenBundleCache(dir)
		if err != nil {
			t.Fatal(err)
		}
		rl := &rederive.RemoteLedger{Client: client.New(other.url, other.verifier), Cache: cache}
		pin, _, err := rl.Pin(context.Background(), "payments")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := readRange(rl.Reader("payments", pin), 0, 10); !errors.Is(err, rederive.ErrVerification) || len(got) != 0 {
			t.Errorf("read from a server inconsistent with the cache: %d records, %v; want rederive.ErrVerification", len(got), err)
		}
		if st := cache.Stats(); st.Hits != 0 {
			t.Errorf("cache %+v: a bundle was used", st)
		}
		// Without the cache the same server is read: the failure is the
		// inconsistency with what was cached, not the server.
		rl = &rederive.RemoteLedger{Client: client.New(other.url, other.verifier)}
		if got, err := readRange(rl.Reader("payments", pin), 0, 10); err != nil || len(got) != 10 {
			t.Errorf("the same server without the cache: %d records, %v", len(got), err)
		}
	})
}

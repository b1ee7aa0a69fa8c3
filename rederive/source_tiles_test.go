package rederive_test

// The remote ledger's proof by tiles (client.Tree) against a real server
// of 5,000 entries (19 full bundles of 256 and a partial one of 136),
// through proxies that lie in the tiles or in the entries, past the
// boundaries of a bundle (255/256), a read batch (1,023/1,024) and the
// partial last bundle.

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/rederive"
)

// rewriteRanges passes every entries-range answer's entries through fn.
func rewriteRanges(t *testing.T, fn func([]client.Entry) []client.Entry) func(r *http.Request, body []byte) []byte {
	return func(r *http.Request, body []byte) []byte {
		if r.URL.Path != "/v1/logs/payments/entries" || !r.URL.Query().Has("start") {
			return nil
		}
		var out struct {
			Entries []client.Entry `json:"entries"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Errorf("proxy: %v", err)
			return nil
		}
		out.Entries = fn(out.Entries)
		b, _ := json.Marshal(out)
		return b
	}
}

// at returns the position of entry index in es, or -1.
func at(es []client.Entry, index uint64) int {
	for i := range es {
		if es[i].Index == index {
			return i
		}
	}
	return -1
}

func TestRemoteLogTiles(t *testing.T) {
	s := newRemoteTestServer(t)

	t.Run("no proofs fetched", func(t *testing.T) {
		// Every entry of the log read in fold batches: the tiles prove
		// them, 1 level-1 tile and the partial bundle's level-0 tile, and
		// no inclusion or consistency proof is fetched.
		var mu sync.Mutex
		count := map[string]int{}
		url := tamperingProxy(t, s.url, func(r *http.Request, _ []byte) []byte {
			kind := r.URL.Path
			if i := strings.Index(kind, "/tile/"); i >= 0 {
				kind = kind[:i+len("/tile/")+1] // the level
			}
			mu.Lock()
			count[kind]++
			mu.Unlock()
			return nil
		})
		rl, pin := s.ledger(t, url, 0)
		rl.JSONPages = true
		r := rl.Reader("payments", pin)
		var wg sync.WaitGroup
		for from := uint64(0); from < remoteTestEntries; from += 1024 {
			wg.Go(func() {
				to := min(from+1024, remoteTestEntries)
				if got, err := readRange(r, from, to); err != nil || uint64(len(got)) != to-from {
					t.Errorf("Entries(%d, %d): %d records, %v", from, to, len(got), err)
				}
			})
		}
		wg.Wait()
		const p = "/v1/logs/payments/"
		if count[p+"proof/inclusion"]+count[p+"proof/consistency"] != 0 || count[p+"tile/1"] != 1 || count[p+"tile/0"] != 1 {
			t.Errorf("requests %v: want no proofs, one level-1 tile and one level-0 tile", count)
		}
	})

	// Lies in the tiles: every read that rests on the lie fails.
	tileLies := []struct {
		name, path string
		edit       func([]byte) []byte
		// bad are ranges that must fail; good, ranges that must still read.
		bad, good [][2]uint64
	}{
		{"level-1 tile, a hash flipped", "tile/1/000.p/19", func(b []byte) []byte { b[32*7] ^= 1; return b },
			[][2]uint64{{0, 1}, {4999, 5000}, {1792, 2048}}, nil},
		{"level-1 tile, truncated", "tile/1/000.p/19", func(b []byte) []byte { return b[:len(b)-1] },
			[][2]uint64{{0, 1024}}, nil},
		{"partial level-0 tile, a hash flipped", "tile/0/019.p/136", func(b []byte) []byte { b[32*135+5] ^= 1; return b },
			[][2]uint64{{0, 1024}, {4864, 5000}}, nil},
		{"full level-0 tile, a hash flipped", "tile/0/005", func(b []byte) []byte { b[32*200] ^= 1; return b },
			// Only reads that do not cover bundle 5 ([1280, 1536)) whole
			// need its tile.
			[][2]uint64{{1500, 1501}, {1300, 2000}, {1024, 1281}},
			[][2]uint64{{1024, 2048}, {1280, 1536}, {0, 1280}, {1536, 1537}}},
		{"full level-0 tile, truncated", "tile/0/003", func(b []byte) []byte { return b[:32*255] },
			[][2]uint64{{1000, 1023}}, [][2]uint64{{0, 1024}}},
	}
	for _, c := range tileLies {
		for _, jsonPages := range []bool{true, false} {
			if !jsonPages && strings.HasPrefix(c.name, "full level-0") {
				continue // bundles read whole never need a full level-0 tile
			}
			t.Run(c.name+map[bool]string{true: ", JSON pages", false: ", bundles"}[jsonPages], func(t *testing.T) {
				url := tamperingProxy(t, s.url, func(r *http.Request, body []byte) []byte {
					if r.URL.Path != "/v1/logs/payments/"+c.path {
						return nil
					}
					return c.edit(body)
				})
				rl, pin := s.ledger(t, url, 0)
				rl.JSONPages = jsonPages
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

	// Lies in the entries, at the boundaries: each genuine entry but in
	// the wrong place, or missing, or twice. Every read that covers the
	// lie fails, whatever the range.
	entryLies := []struct {
		name string
		edit func(es []client.Entry) []client.Entry
		bad  [][2]uint64
	}{
		{"entries 255 and 256 swapped (bundle edge)", swapEntries(255, 256), [][2]uint64{{0, 1024}, {255, 257}, {254, 258}}},
		{"entries 1023 and 1024 swapped (batch edge)", swapEntries(1023, 1024), [][2]uint64{{1000, 1100}, {1023, 1025}, {512, 1536}}},
		{"entries 4998 and 4999 swapped (partial last bundle)", swapEntries(4998, 4999), [][2]uint64{{4096, 5000}, {4998, 5000}, {4864, 5000}}},
		{"entry 1024 dropped", func(es []client.Entry) []client.Entry {
			if i := at(es, 1024); i >= 0 {
				return append(es[:i:i], es[i+1:]...)
			}
			return es
		}, [][2]uint64{{1024, 2048}, {1000, 1100}}},
		{"entry 256 served twice, 257 left out", func(es []client.Entry) []client.Entry {
			if i := at(es, 256); i >= 0 && i+1 < len(es) {
				d := es[i]
				d.Index = 257
				es[i+1] = d
			}
			return es
		}, [][2]uint64{{0, 1024}, {256, 258}}},
		{"last entry dropped", func(es []client.Entry) []client.Entry {
			if len(es) > 0 && es[len(es)-1].Index == remoteTestEntries-1 {
				return es[:len(es)-1]
			}
			return es
		}, [][2]uint64{{4096, 5000}, {4999, 5000}}},
	}
	for _, c := range entryLies {
		t.Run(c.name, func(t *testing.T) {
			url := tamperingProxy(t, s.url, rewriteRanges(t, c.edit))
			rl, pin := s.ledger(t, url, 0)
			rl.JSONPages = true // the lies are in the JSON listing
			r := rl.Reader("payments", pin)
			for _, rg := range c.bad {
				if got, err := readRange(r, rg[0], rg[1]); !errors.Is(err, rederive.ErrVerification) || len(got) != 0 {
					t.Errorf("Entries(%d, %d): %d records, %v; want none and rederive.ErrVerification", rg[0], rg[1], len(got), err)
				}
			}
		})
	}

	t.Run("a server without tiles", func(t *testing.T) {
		// Tiles answered 404: each page is proven with proofs instead,
		// and a forged entry is still caught.
		srv := notFoundTiles(t, s.url)
		rl, pin := s.ledger(t, srv, 0)
		if got, err := readRange(rl.Reader("payments", pin), 1000, 3000); err != nil || len(got) != 2000 {
			t.Fatalf("Entries(1000, 3000) without tiles: %d records, %v", len(got), err)
		}
		url := tamperingProxy(t, srv, forgeRanges(t, 2000))
		rl, pin = s.ledger(t, url, 0)
		if _, err := readRange(rl.Reader("payments", pin), 1500, 2600); !errors.Is(err, rederive.ErrVerification) {
			t.Errorf("Entries(1500, 2600) over a forged entry, without tiles: %v, want rederive.ErrVerification", err)
		}
	})
}

// swapEntries serves entry i under index j and j under i.
func swapEntries(i, j uint64) func([]client.Entry) []client.Entry {
	return func(es []client.Entry) []client.Entry {
		a, b := at(es, i), at(es, j)
		if a >= 0 && b >= 0 {
			es[a], es[b] = es[b], es[a]
			es[a].Index, es[b].Index = i, j
		}
		return es
	}
}

// notFoundTiles is a proxy of upstream that answers 404 for every tile.
func notFoundTiles(t *testing.T, upstream string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/tile/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"no tiles here"}`)
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

// BenchmarkRemoteLogRead reads the 5,000 entries of the test server in
// fold batches of 1,024, two at a time, proven by the tiles or by two
// proofs per page (client and server in this process, as in
// auditd-bench verify).
func BenchmarkRemoteLogRead(b *testing.B) {
	s := newRemoteTestServer(b)
	for _, proofs := range []bool{false, true} {
		b.Run(map[bool]string{false: "tiles", true: "page-proofs"}[proofs], func(b *testing.B) {
			for b.Loop() {
				rl := &rederive.RemoteLedger{Client: client.New(s.url, s.verifier), PageProofs: proofs}
				pin, _, err := rl.Pin(b.Context(), "payments")
				if err != nil {
					b.Fatal(err)
				}
				r := rl.Reader("payments", pin)
				var wg sync.WaitGroup
				sem := make(chan struct{}, 2)
				for from := uint64(0); from < remoteTestEntries; from += 1024 {
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						if _, err := readRange(r, from, min(from+1024, remoteTestEntries)); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(remoteTestEntries*b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/merkle"
)

// The remote verify tests past the fold engine's first read batch: a log
// of payments of more than 3,000 entries (three batches of 1,024 and a
// part), read by auditd verify --server through tampering proxies.

// bigPayments is the number of payments the big daemon serves: the 5 of
// verifyEvents, then bigPayment(5), bigPayment(6), ...
const bigPayments = 3105

// bigPayment returns the account and amount of payment i >= 5.
func bigPayment(i int) (string, int64) {
	return fmt.Sprintf("acct-%d", i%7), int64(i%13 + 1)
}

// bigBalances returns the balances of the first n payments.
func bigBalances(n int) map[string]int64 {
	out := map[string]int64{}
	for i, e := range verifyEvents[:min(n, len(verifyEvents))] {
		var ev struct {
			Payload struct {
				Account string
				Amount  int64
			}
		}
		if err := json.Unmarshal([]byte(e), &ev); err != nil {
			panic(fmt.Sprintf("verifyEvents[%d]: %v", i, err))
		}
		out[ev.Payload.Account] += ev.Payload.Amount
	}
	for i := len(verifyEvents); i < n; i++ {
		a, amt := bigPayment(i)
		out[a] += amt
	}
	return out
}

// startBigVerifyDaemon starts the verify daemon and posts payments up to
// bigPayments, in requests of 1,000, each waiting for its checkpoint.
func startBigVerifyDaemon(t *testing.T) *verifyDaemon {
	t.Helper()
	d := startVerifyDaemon(t)
	var b strings.Builder
	for i := len(verifyEvents); i < bigPayments; i++ {
		a, amt := bigPayment(i)
		fmt.Fprintf(&b, `{"id":"q-%d","payload":{"account":%q,"amount":%d}}`+"\n", i, a, amt)
		if (i+1)%1000 == 0 || i == bigPayments-1 {
			post(t, d.url+"/v1/logs/payments/entries?wait=checkpoint", b.String())
			b.Reset()
		}
	}
	return d
}

// forgeEntry replaces e's payload with payload and recomputes its leaf,
// leaf hash and payload hash from its fields: the entry checks out alone.
func forgeEntry(t *testing.T, e *client.Entry, payload []byte) {
	orig := *e
	leaf, _, _, err := orig.Decode("payments")
	if err != nil {
		t.Errorf("proxy: entry %d: %v", e.Index, err)
		return
	}
	leaf.PayloadSHA256 = sha256.Sum256(payload)
	lb, err := leaf.MarshalBinary()
	if err != nil {
		t.Errorf("proxy: %v", err)
		return
	}
	s := base64.StdEncoding.EncodeToString(payload)
	e.PayloadBase64, e.Payload = &s, nil
	e.Leaf = base64.StdEncoding.EncodeToString(lb)
	e.LeafHash = merkle.LeafHash(lb)
	e.PayloadSHA256 = base64.StdEncoding.EncodeToString(leaf.PayloadSHA256[:])
	if _, err := e.RecomputeLeaf("payments"); err != nil {
		t.Errorf("proxy: the forged entry %d does not check out alone: %v", e.Index, err)
	}
}

// flipAllHashes flips a bit of every hash of a proof response, so a lie
// is in the nodes a check reads whichever they are.
func flipAllHashes(t *testing.T, body []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("proxy: proof response: %v", err)
		return nil
	}
	var hs []merkle.Hash
	if err := json.Unmarshal(m["hashes"], &hs); err != nil {
		t.Errorf("proxy: proof hashes %s: %v", m["hashes"], err)
		return nil
	}
	for i := range hs {
		hs[i][31] ^= 0x40
	}
	m["hashes"], _ = json.Marshal(hs)
	b, _ := json.Marshal(m)
	return b
}

// bigTlog returns the tree of the daemon's payments built with sumdb/tlog
// from the leaves recomputed from the entries' fields, after checking its
// root at the full size against the signed checkpoint.
func bigTlog(t *testing.T, d *verifyDaemon) tlog.HashReaderFunc {
	t.Helper()
	key, err := os.ReadFile(d.vkeyFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(d.url, v)
	ctx := context.Background()
	cp, _, err := c.Checkpoint(ctx, "payments")
	if err != nil || cp.Size != bigPayments {
		t.Fatalf("checkpoint: size %d, %v", cp.Size, err)
	}
	es, err := c.Entries(ctx, "payments", 0, bigPayments)
	if err != nil || len(es) != bigPayments {
		t.Fatalf("entries: %d, %v", len(es), err)
	}
	var stored []tlog.Hash
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i := range es {
		h, err := es[i].RecomputeLeaf("payments")
		if err != nil {
			t.Fatal(err)
		}
		hs, err := tlog.StoredHashesForRecordHash(int64(i), tlog.Hash(h), r)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	if root, err := tlog.TreeHash(bigPayments, r); err != nil || merkle.Hash(root) != cp.Root {
		t.Fatalf("tlog root of the %d entries %s (%v), checkpoint %s", bigPayments, root, err, cp.Root)
	}
	return r
}

func TestVerifyRemoteBeyondFirstBatch(t *testing.T) {
	d := startBigVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(bigBalances(bigPayments))
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})

	t.Run("honest server", func(t *testing.T) {
		// Through a proxy that changes nothing but counts the requests: a
		// clean run, every page proven by the tiles, no proof fetched: the
		// level-1 tile of the 12 full bundles and the level-0 tile of the
		// partial last one.
		var mu sync.Mutex
		count := map[string]int{}
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			mu.Lock()
			count[r.URL.Path]++
			mu.Unlock()
			return nil
		})
		jsonFile := filepath.Join(t.TempDir(), "r.json")
		r := runVerifyTest(t, d.remoteArgs(url, spec, "--json", jsonFile)...)
		if r.code != exitClean {
			t.Fatalf("honest server of %d entries: %v", bigPayments, r)
		}
		rep := readVerifyJSON(t, jsonFile).Reports[0]
		if rep.Events != bigPayments || rep.Stats.Matched != 10 || len(rep.Pins) != 1 || rep.Pins[0].Size != bigPayments {
			t.Errorf("events %d, matched %d, pins %+v", rep.Events, rep.Stats.Matched, rep.Pins)
		}
		incl, cons := count["/v1/logs/payments/proof/inclusion"], count["/v1/logs/payments/proof/consistency"]
		t1, t0 := count["/v1/logs/payments/tile/1/000.p/12"], count["/v1/logs/payments/tile/0/012.p/33"]
		if incl != 0 || cons != 0 || t1 != 1 || t0 != 1 {
			t.Errorf("%d inclusion and %d consistency proofs, %d level-1 and %d level-0 tiles fetched; want no proofs, one tile each (%v)", incl, cons, t1, t0, count)
		}
	})

	t.Run("entry 3000 rewritten with its leaf", func(t *testing.T) {
		// Entry 3000's amount raised by 1,000,000, its leaf recomputed to
		// match: it checks out alone; only its tree can tell.
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if !isPaymentsRange(r) {
				return nil
			}
			return rewriteEntries(t, body, func(e *client.Entry) {
				if e.Index != 3000 {
					return
				}
				a, amt := bigPayment(3000)
				forgeEntry(t, e, fmt.Appendf(nil, `{"account":%q,"amount":%d}`, a, amt+1_000_000))
			})
		})
		url = jsonOnlyProxy(t, url) // the lie is in the JSON listing: a server without payload bundles
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entries [2816, 3072) of payments hash to")
	})

	t.Run("entries 2999 and 3000 swapped", func(t *testing.T) {
		// Two genuine entries, each under the other's index: the same
		// balances, so only the tree can tell.
		perm := make([]int, bigPayments)
		for i := range perm {
			perm[i] = i
		}
		perm[2999], perm[3000] = 3000, 2999
		url := tamperProxy(t, d.url, permutedEntries(t, d.url, perm))
		url = jsonOnlyProxy(t, url) // the lie is in the JSON listing: a server without payload bundles
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entries [2816, 3072) of payments hash to")
	})

	t.Run("the last page rewritten", func(t *testing.T) {
		// The partial last bundle is checked against its level-0 tile,
		// proven with the others against the checkpoint's root.
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if !isPaymentsRange(r) {
				return nil
			}
			return rewriteEntries(t, body, func(e *client.Entry) {
				if e.Index != bigPayments-1 {
					return
				}
				forgeEntry(t, e, []byte(`{"account":"mallory","amount":1}`))
			})
		})
		url = jsonOnlyProxy(t, url) // the lie is in the JSON listing: a server without payload bundles
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entry 3104 of payments has leaf hash")
	})

	for _, proof := range []string{"inclusion", "consistency"} {
		t.Run("lying "+proof+" proofs, no tiles", func(t *testing.T) {
			// A server that serves no tiles: every page is proven with
			// proofs, as before there were tiles.
			url := noTilesProxy(t, tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
				if r.URL.Path != "/v1/logs/payments/proof/"+proof {
					return nil
				}
				return flipAllHashes(t, body)
			}))
			checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "as served")
		})
	}

	t.Run("honest server without tiles", func(t *testing.T) {
		if r := runVerifyTest(t, d.remoteArgs(noTilesProxy(t, d.url), spec)...); r.code != exitClean {
			t.Fatalf("honest server without tiles: %v", r)
		}
	})

	for _, c := range []struct{ name, path, detail string }{
		{"lying level-1 tile", "/v1/logs/payments/tile/1/000.p/12", "tiles of payments hash to root"},
		{"lying partial level-0 tile", "/v1/logs/payments/tile/0/012.p/33", "tiles of payments hash to root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
				if r.URL.Path != c.path {
					return nil
				}
				body[len(body)-1] ^= 1
				return body
			})
			checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), c.detail)
		})
	}

	t.Run("watermark below the checkpoint", func(t *testing.T) {
		// The store applied 2,500 entries: the run is judged at 2,500, and
		// the pin carries the root of that tree (tlog's, from leaves
		// checked against the signed checkpoint).
		const wm = 2500
		tree := bigTlog(t, d)
		want, err := tlog.TreeHash(wm, tree)
		if err != nil {
			t.Fatal(err)
		}
		wt := newVerifyTable(t)
		wt.set(bigBalances(wm))
		wspec := writeVerifySpec(t, wt.name, verifySpecOpts{watermarkQuery: fmt.Sprintf("SELECT 'payments', %d::bigint", wm)})
		jsonFile := filepath.Join(t.TempDir(), "r.json")
		r := runVerifyTest(t, d.remoteArgs(d.url, wspec, "--json", jsonFile)...)
		if r.code != exitClean {
			t.Fatalf("watermark %d, honest server: %v", wm, r)
		}
		rep := readVerifyJSON(t, jsonFile).Reports[0]
		if rep.Events != wm || len(rep.Pins) != 1 {
			t.Fatalf("watermark %d: events %d, pins %+v", wm, rep.Events, rep.Pins)
		}
		pin := rep.Pins[0]
		if pin.Size != wm || pin.Root != merkle.Hash(want) || pin.Root == (merkle.Hash{}) {
			t.Errorf("pin at the watermark: size %d root %s, want size %d root %s", pin.Size, pin.Root, wm, merkle.Hash(want))
		}
		if !strings.Contains(strings.SplitN(pin.Checkpoint, "\n\n", 2)[0], fmt.Sprintf("/payments\n%d\n", bigPayments)) {
			t.Errorf("pin names checkpoint %q, want the signed one of size %d", pin.Checkpoint, bigPayments)
		}

		// Entry 2499, the one the root at 2,500 is computed from, forged:
		// the root is wrong, and no consistency proof makes it a prefix.
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if !isPaymentsRange(r) {
				return nil
			}
			return rewriteEntries(t, body, func(e *client.Entry) {
				if e.Index == wm-1 {
					forgeEntry(t, e, []byte(`{"account":"mallory","amount":1}`))
				}
			})
		})
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, wspec)...), "root of payments at size 2500")
	})
}

// noTilesProxy serves upstream but answers 404 for every tile, as a
// server from before tiles would.
func noTilesProxy(t *testing.T, upstream string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/tile/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not found"}`)
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

// jsonOnlyProxy serves upstream but answers 404 for payload bundles, as a
// server from before them would: entries are read from the JSON listing.
func jsonOnlyProxy(t *testing.T, upstream string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/payloads/") || strings.Contains(r.URL.Path, "/bundles/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not found"}`)
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

// editPayloadBundle rewrites entry i of a payload bundle with edit (a nil
// result: the marker of a payload not held).
func editPayloadBundle(b []byte, i int, edit func([]byte) []byte) []byte {
	var ps [][]byte
	for len(b) >= 4 {
		l := binary.BigEndian.Uint32(b)
		b = b[4:]
		if l == 1<<32-1 {
			ps = append(ps, nil)
			continue
		}
		ps = append(ps, append([]byte(nil), b[:l]...))
		b = b[l:]
	}
	ps[i] = edit(ps[i])
	var out []byte
	for _, p := range ps {
		if p == nil {
			out = binary.BigEndian.AppendUint32(out, 1<<32-1)
			continue
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out
}

// TestVerifyRemoteBundles: auditd verify --server reads the entries from
// entry and payload bundles; a server that lies in them exits 3, past the
// boundaries of a bundle, a read batch and the partial last bundle; with
// --cache-dir a second run reads the full bundles from the cache, a
// damaged cache is refetched, and a lie in what is not cached still
// exits 3.
func TestVerifyRemoteBundles(t *testing.T) {
	d := startBigVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(bigBalances(bigPayments))
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	const p = "/v1/logs/payments/"

	t.Run("honest server", func(t *testing.T) {
		var mu sync.Mutex
		count := map[string]int{}
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			mu.Lock()
			count[r.URL.Path]++
			mu.Unlock()
			return nil
		})
		if r := runVerifyTest(t, d.remoteArgs(url, spec)...); r.code != exitClean {
			t.Fatalf("honest server: %v", r)
		}
		ranges, bundles := 0, 0
		for path, n := range count {
			switch {
			case path == p+"entries":
				ranges += n
			case strings.HasPrefix(path, p+"payloads/"):
				bundles += n
			}
		}
		if ranges != 0 || bundles != 13 {
			t.Errorf("%d JSON ranges and %d payload bundles fetched; want none and 13 (%v)", ranges, bundles, count)
		}
	})

	swap := func(a, b int) func(r *http.Request, body []byte) []byte {
		return func(r *http.Request, body []byte) []byte {
			path := strings.TrimPrefix(r.URL.Path, p+"payloads/")
			for _, c := range [][2]int{{a, b}, {b, a}} {
				if path == client.TilePath(0, uint64(c[0]/256), 256)[2:] {
					acct, amt := bigPayment(c[1])
					return editPayloadBundle(body, c[0]%256, func([]byte) []byte {
						return fmt.Appendf(nil, `{"account":%q,"amount":%d}`, acct, amt)
					})
				}
			}
			return nil
		}
	}
	lies := []struct {
		name   string
		edit   func(r *http.Request, body []byte) []byte
		detail string
	}{
		{"payload byte flipped (entry 3000)", func(r *http.Request, body []byte) []byte {
			if r.URL.Path != p+"payloads/011" {
				return nil
			}
			return editPayloadBundle(body, 3000%256, func(v []byte) []byte { v[len(v)-2] ^= 1; return v })
		}, "entry 3000 of payments: the payload served does not hash"},
		{"payloads of 1023 and 1024 swapped", swap(1023, 1024), "the payload served does not hash"},
		{"payloads of 2815 and 2816 swapped", swap(2815, 2816), "the payload served does not hash"},
		{"the partial last bundle's payload rewritten", func(r *http.Request, body []byte) []byte {
			if r.URL.Path != p+"payloads/012.p/33" {
				return nil
			}
			return editPayloadBundle(body, 32, func([]byte) []byte { return []byte(`{"account":"mallory","amount":1}`) })
		}, "entry 3104 of payments: the payload served does not hash"},
		{"payload bundle truncated", func(r *http.Request, body []byte) []byte {
			if r.URL.Path != p+"payloads/005" {
				return nil
			}
			return body[:len(body)-3]
		}, "payload bundle 5 of payments: truncated"},
		{"entry bundle of the wrong index", func(r *http.Request, body []byte) []byte {
			if r.URL.Path != p+"tile/entries/005" {
				return nil
			}
			resp, err := http.Get(d.url + p + "tile/entries/006")
			if err != nil {
				t.Error(err)
				return nil
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return b
		}, "entries [1280, 1536) of payments hash to"},
		{"pruned marker on an unpruned entry", func(r *http.Request, body []byte) []byte {
			if r.URL.Path != p+"payloads/002" {
				return nil
			}
			return editPayloadBundle(body, 7, func([]byte) []byte { return nil })
		}, "entry 519 of payments: payload withheld as pruned"},
	}
	for _, c := range lies {
		t.Run(c.name, func(t *testing.T) {
			checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(tamperProxy(t, d.url, c.edit), spec)...), c.detail)
		})
	}

	t.Run("--cache-dir", func(t *testing.T) {
		cache := t.TempDir()
		var mu sync.Mutex
		bundles := 0
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if strings.HasPrefix(r.URL.Path, p+"payloads/") {
				mu.Lock()
				bundles++
				mu.Unlock()
			}
			return nil
		})
		fetched := func() int { mu.Lock(); defer mu.Unlock(); n := bundles; bundles = 0; return n }
		for run, want := range []int{13, 1} {
			if r := runVerifyTest(t, d.remoteArgs(url, spec, "--cache-dir", cache)...); r.code != exitClean {
				t.Fatalf("run %d with --cache-dir: %v", run+1, r)
			}
			if n := fetched(); n != want {
				t.Errorf("run %d: %d payload bundles fetched, want %d", run+1, n, want)
			}
		}
		// A flipped byte in a cached bundle: refetched, still clean.
		files, _ := filepath.Glob(filepath.Join(cache, "v1", "*", "*.bundle"))
		if len(files) != 12 {
			t.Fatalf("%d bundles cached, want 12", len(files))
		}
		b, _ := os.ReadFile(files[3])
		b[len(b)-5] ^= 1
		os.WriteFile(files[3], b, 0o644)
		if r := runVerifyTest(t, d.remoteArgs(url, spec, "--cache-dir", cache)...); r.code != exitClean {
			t.Fatalf("damaged cache: %v", r)
		}
		if n := fetched(); n != 2 {
			t.Errorf("damaged cache: %d payload bundles fetched, want 2 (the damaged one and the partial one)", n)
		}
		// A lie in the partial bundle, never cached, still exits 3.
		lie := tamperProxy(t, d.url, lies[3].edit)
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(lie, spec, "--cache-dir", cache)...), lies[3].detail)
	})
}

package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestCombinedBundles serves bundles/<N>[.p/<W>] past a 256-entry
// boundary, over a log whose first 300 payloads are pruned and whose entry
// 400 is oversize: each is the u32 length of the entry bundle, the entry
// bundle and the payload bundle, byte for byte those served apart, with
// the pruning watermark, no-cache, gzip when asked, ETag and 304; its 404s
// carry the watermark (a 404 without it is a server without combined
// bundles). Then client.Tree.Bundle, which reads them, proves every bundle.
func TestCombinedBundles(t *testing.T) {
	t.Parallel()
	const n, cut, oversize = 600, 300, 400
	env := newTestEnv(t, envConfig{logs: []string{"cb"}})
	ctx := context.Background()
	l, err := env.store.Log("cb")
	if err != nil {
		t.Fatal(err)
	}
	payload := func(i int) []byte { return fmt.Appendf(nil, `{"i":%d}`, i) }
	var es []ledger.Entry
	for i := range n {
		e := ledger.Entry{ID: fmt.Sprintf("e%d", i), Payload: payload(i), PayloadJSON: true}
		if i == oversize {
			h := merkle.Hash(sha256.Sum256([]byte("a payload too big to keep")))
			e.Payload, e.PayloadHash, e.Marks = nil, &h, merkle.MarkOversize
		}
		es = append(es, e)
	}
	if _, err := l.Append(ctx, es); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(ctx, n); err != nil {
		t.Fatal(err)
	}
	if res, err := l.PrunePayloads(ctx, ledger.PruneOptions{Before: cut}); err != nil || res.To != cut {
		t.Fatalf("prune: %+v, %v", res, err)
	}

	for _, path := range []string{"000", "001", "002.p/88", "002.p/3"} {
		r := env.get("/v1/logs/cb/bundles/"+path, http.StatusOK)
		if cc, wm := r.header.Get("Cache-Control"), r.header.Get("Auditd-Prune-Watermark"); cc != "no-cache" || wm != fmt.Sprint(cut) {
			t.Errorf("bundles/%s: Cache-Control %q, watermark %q; want no-cache and %d", path, cc, wm, cut)
		}
		entries := env.get("/v1/logs/cb/tile/entries/"+path, http.StatusOK).body
		payloads := env.get("/v1/logs/cb/payloads/"+path, http.StatusOK).body
		want := binary.BigEndian.AppendUint32(nil, uint32(len(entries)))
		want = append(append(want, entries...), payloads...)
		if !bytes.Equal(r.body, want) {
			t.Errorf("bundles/%s: %d bytes, not the entry bundle's length, the entry bundle (%d) and the payload bundle (%d)",
				path, len(r.body), len(entries), len(payloads))
		}
		g := env.do(http.MethodGet, "/v1/logs/cb/bundles/"+path, nil, "Accept-Encoding: gzip")
		if g.header.Get("Content-Encoding") != "gzip" {
			t.Errorf("bundles/%s with Accept-Encoding gzip: %v", path, g.header)
		} else if zr, err := gzip.NewReader(bytes.NewReader(g.body)); err != nil {
			t.Error(err)
		} else if b, _ := io.ReadAll(zr); !bytes.Equal(b, r.body) {
			t.Errorf("bundles/%s: the gzip form does not decompress to the bundle", path)
		}
		if nm := env.do(http.MethodGet, "/v1/logs/cb/bundles/"+path, nil, "If-None-Match: "+r.header.Get("ETag")); nm.status != http.StatusNotModified || len(nm.body) != 0 {
			t.Errorf("bundles/%s with If-None-Match: %v", path, nm)
		}
	}
	for _, c := range []struct{ path, code string }{
		{"002", "tile_not_found"}, {"002.p/89", "tile_not_found"}, {"003.p/1", "tile_not_found"},
		{"2", "bad_tile_path"}, {"000.p/256", "bad_tile_path"}, {"000.p/0", "bad_tile_path"}, {"x000/001", "bad_tile_path"},
	} {
		r := env.get("/v1/logs/cb/bundles/"+c.path, http.StatusNotFound)
		if !bytes.Contains(r.body, []byte(`"code":"`+c.code+`"`)) || r.header.Get("Auditd-Prune-Watermark") != fmt.Sprint(cut) {
			t.Errorf("bundles/%s: %s (watermark %q), want code %s and the watermark", c.path, r.body, r.header.Get("Auditd-Prune-Watermark"), c.code)
		}
	}

	// ?count=K: the K full bundles from N, each preceded by its length.
	var two []byte
	for _, path := range []string{"000", "001"} {
		one := env.get("/v1/logs/cb/bundles/"+path, http.StatusOK).body
		two = append(binary.BigEndian.AppendUint32(two, uint32(len(one))), one...)
	}
	if r := env.get("/v1/logs/cb/bundles/000?count=2", http.StatusOK); !bytes.Equal(r.body, two) || r.header.Get("Auditd-Prune-Watermark") != fmt.Sprint(cut) {
		t.Errorf("bundles/000?count=2: %d bytes, watermark %q; want bundles 000 and 001, each after its length (%d bytes)",
			len(r.body), r.header.Get("Auditd-Prune-Watermark"), len(two))
	}
	if r := env.get("/v1/logs/cb/bundles/001?count=1", http.StatusOK); !bytes.Equal(r.body, two[4+binary.BigEndian.Uint32(two)+4:]) {
		t.Errorf("bundles/001?count=1 is not bundles/001")
	}
	for _, c := range []struct{ path, code string }{
		{"000?count=3", "tile_not_found"}, {"001?count=2", "tile_not_found"}, {"002.p/88?count=2", "bad_tile_path"},
		{"000?count=0", "bad_tile_path"}, {"000?count=17", "bad_tile_path"}, {"000?count=02", "bad_tile_path"}, {"000?count=x", "bad_tile_path"},
	} {
		if r := env.get("/v1/logs/cb/bundles/"+c.path, http.StatusNotFound); !bytes.Contains(r.body, []byte(`"code":"`+c.code+`"`)) {
			t.Errorf("bundles/%s: %s, want code %s", c.path, r.body, c.code)
		}
	}

	// The ETag digests the leaf hashes and the withheld payloads: pruning
	// more changes it, and the old one no longer revalidates.
	before := env.get("/v1/logs/cb/bundles/001", http.StatusOK)
	if other := env.get("/v1/logs/cb/bundles/000", http.StatusOK); other.header.Get("ETag") == before.header.Get("ETag") {
		t.Errorf("bundles 000 and 001 have the same ETag %s", before.header.Get("ETag"))
	}
	if res, err := l.PrunePayloads(ctx, ledger.PruneOptions{Before: cut + 10}); err != nil || res.To != cut+10 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	after := env.do(http.MethodGet, "/v1/logs/cb/bundles/001", nil, "If-None-Match: "+before.header.Get("ETag"))
	if after.status != http.StatusOK || after.header.Get("ETag") == before.header.Get("ETag") || bytes.Equal(after.body, before.body) {
		t.Errorf("bundles/001 after pruning to %d: %d, ETag %s (was %s)", cut+10, after.status, after.header.Get("ETag"), before.header.Get("ETag"))
	}
	payload0 := payload
	payload = func(i int) []byte {
		if i < cut+10 {
			return nil
		}
		return payload0(i)
	}

	c := client.New(env.http.URL, env.verifier)
	cp, _, err := c.Checkpoint(ctx, "cb")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Tree(ctx, "cb", cp)
	if err != nil {
		t.Fatal(err)
	}
	full, err := tree.Bundles(ctx, 0, 2)
	if err != nil {
		t.Fatalf("bundles 0 and 1: %v", err)
	}
	for b := uint64(0); b*256 < n; b++ {
		bu, err := tree.Bundle(ctx, b)
		if err != nil {
			t.Fatalf("bundle %d: %v", b, err)
		}
		if b < 2 && (fmt.Sprint(full[b].Pruned) != fmt.Sprint(bu.Pruned) || fmt.Sprint(full[b].Hashes) != fmt.Sprint(bu.Hashes) || fmt.Sprint(full[b].Payloads) != fmt.Sprint(bu.Payloads)) {
			t.Errorf("bundle %d read with the other: not the same", b)
		}
		for i := range bu.Leaves {
			idx := int(b)*256 + i
			if want := idx < cut+10 || idx == oversize; bu.Pruned[i] != want || (!want && !bytes.Equal(bu.Payloads[i], payload(idx))) {
				t.Errorf("entry %d: pruned %v, payload %q", idx, bu.Pruned[i], bu.Payloads[i])
			}
		}
	}
}

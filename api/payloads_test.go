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

// splitPayloadBundle decodes a payload bundle: u32 length-prefixed
// payloads, nil for the marker of a payload not held.
func splitPayloadBundle(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("payload bundle: %d trailing bytes", len(b))
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if n == 1<<32-1 {
			out = append(out, nil)
			continue
		}
		if uint32(len(b)) < n {
			t.Fatalf("payload bundle: payload of %d bytes truncated to %d", n, len(b))
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// TestPayloadBundles serves payloads/<N>[.p/<W>] past a 256-entry
// boundary, over a log whose first 300 payloads are pruned and whose
// entry 400 is oversize (ledgered by its hash): each payload is the
// entry's, a pruned or oversize one is the marker, the pruning watermark
// comes in a header; gzip when asked, ETag and 304, never immutable; a
// bundle beyond the tree or a bad path is 404. Then client.Tree.Bundle
// reads every bundle and proves it: pruned entries and the oversize one
// come back marked, every other payload as ledgered.
func TestPayloadBundles(t *testing.T) {
	t.Parallel()
	const n, cut, oversize = 600, 300, 400
	env := newTestEnv(t, envConfig{logs: []string{"pb"}})
	ctx := context.Background()
	l, err := env.store.Log("pb")
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

	for _, c := range []struct {
		path    string
		from, w int
	}{{"000", 0, 256}, {"001", 256, 256}, {"002.p/88", 512, 88}, {"002.p/3", 512, 3}} {
		r := env.get("/v1/logs/pb/payloads/"+c.path, http.StatusOK)
		if cc, wm := r.header.Get("Cache-Control"), r.header.Get("Auditd-Prune-Watermark"); cc != "no-cache" || wm != fmt.Sprint(cut) {
			t.Errorf("payloads/%s: Cache-Control %q, watermark %q; want no-cache and %d", c.path, cc, wm, cut)
		}
		ps := splitPayloadBundle(t, r.body)
		if len(ps) != c.w {
			t.Fatalf("payloads/%s: %d payloads, want %d", c.path, len(ps), c.w)
		}
		for i, p := range ps {
			idx := c.from + i
			switch {
			case idx < cut || idx == oversize:
				if p != nil {
					t.Errorf("payloads/%s: entry %d is %q, want the marker", c.path, idx, p)
				}
			case !bytes.Equal(p, payload(idx)):
				t.Errorf("payloads/%s: entry %d is %q, want %s", c.path, idx, p, payload(idx))
			}
		}
		// gzip when asked, the same bytes; the ETag revalidates.
		g := env.do(http.MethodGet, "/v1/logs/pb/payloads/"+c.path, nil, "Accept-Encoding: gzip")
		if g.header.Get("Content-Encoding") != "gzip" || g.header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("payloads/%s with Accept-Encoding gzip: %v", c.path, g.header)
		} else if zr, err := gzip.NewReader(bytes.NewReader(g.body)); err != nil {
			t.Error(err)
		} else if b, _ := io.ReadAll(zr); !bytes.Equal(b, r.body) {
			t.Errorf("payloads/%s: the gzip form does not decompress to the bundle", c.path)
		}
		if nm := env.do(http.MethodGet, "/v1/logs/pb/payloads/"+c.path, nil, "If-None-Match: "+r.header.Get("ETag")); nm.status != http.StatusNotModified || len(nm.body) != 0 {
			t.Errorf("payloads/%s with If-None-Match: %v", c.path, nm)
		}
	}
	for _, c := range []struct{ path, code string }{
		{"002", "tile_not_found"}, {"002.p/89", "tile_not_found"}, {"003.p/1", "tile_not_found"},
		{"2", "bad_tile_path"}, {"000.p/256", "bad_tile_path"}, {"000.p/0", "bad_tile_path"}, {"x000/001", "bad_tile_path"},
	} {
		r := env.get("/v1/logs/pb/payloads/"+c.path, http.StatusNotFound)
		if !bytes.Contains(r.body, []byte(`"code":"`+c.code+`"`)) {
			t.Errorf("payloads/%s: %s, want code %s", c.path, r.body, c.code)
		}
	}
	env.get("/v1/logs/nope/payloads/000", http.StatusNotFound)

	// The client proves every bundle: the markers below the watermark
	// and on the oversize entry are taken as such.
	c := client.New(env.http.URL, env.verifier)
	cp, _, err := c.Checkpoint(ctx, "pb")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Tree(ctx, "pb", cp)
	if err != nil {
		t.Fatal(err)
	}
	for b := uint64(0); b*256 < n; b++ {
		bu, err := tree.Bundle(ctx, b)
		if err != nil {
			t.Fatalf("bundle %d: %v", b, err)
		}
		for i := range bu.Leaves {
			idx := int(b)*256 + i
			if want := idx < cut || idx == oversize; bu.Pruned[i] != want || (!want && !bytes.Equal(bu.Payloads[i], payload(idx))) {
				t.Errorf("entry %d: pruned %v, payload %q", idx, bu.Pruned[i], bu.Payloads[i])
			}
		}
	}
}

package api_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/merkle"
)

// splitBundle decodes a C2SP tlog-tiles entry bundle: u16 length-prefixed
// entries.
func splitBundle(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 2 {
			t.Fatalf("bundle: %d trailing bytes", len(b))
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			t.Fatalf("bundle: entry of %d bytes truncated to %d", n, len(b)-2)
		}
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out
}

// TestEntryBundles serves tile/entries/<N>[.p/<W>] past a 256-entry
// boundary: each bundle entry is the exact leaf, hashing to the leaf hash
// the append returned and the level-0 tile holds; full and partial bundles
// are immutable (a partial bundle of width W never changes); a bundle
// beyond the tree is 404 and not cached.
func TestEntryBundles(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","key":"k%d","payload":{"i":%d}}`, i, i, i))
	}
	res, _ := env.post("b", "wait=checkpoint", ndjson(lines...))
	if len(res.Entries) != 300 {
		t.Fatalf("appended %d entries", len(res.Entries))
	}
	for _, c := range []struct {
		path       string
		from, n    int
		cache      string
		tile       string
		recomputed bool
	}{
		{"000", 0, 256, "public, max-age=31536000, immutable", "0/000", true},
		{"001.p/44", 256, 44, "public, max-age=31536000, immutable", "0/001.p/44", true},
		{"001.p/3", 256, 3, "public, max-age=31536000, immutable", "0/001.p/3", false},
	} {
		r := env.get("/v1/logs/b/tile/entries/"+c.path, http.StatusOK)
		if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
			t.Errorf("entries/%s: Content-Type %q", c.path, ct)
		}
		if cc := r.header.Get("Cache-Control"); cc != c.cache {
			t.Errorf("entries/%s: Cache-Control %q, want %q", c.path, cc, c.cache)
		}
		leaves := splitBundle(t, r.body)
		if len(leaves) != c.n {
			t.Fatalf("entries/%s: %d entries, want %d", c.path, len(leaves), c.n)
		}
		tile := env.get("/v1/logs/b/tile/"+c.tile, http.StatusOK).body
		for i, lb := range leaves {
			h := merkle.LeafHash(lb)
			if h != res.Entries[c.from+i].LeafHash || !bytes.Equal(h[:], tile[i*32:(i+1)*32]) {
				t.Fatalf("entries/%s: entry %d hashes to %s, want %s (tile %x)", c.path, i, h, res.Entries[c.from+i].LeafHash, tile[i*32:(i+1)*32])
			}
			var l merkle.Leaf
			if err := l.UnmarshalBinary(lb); err != nil || l.ID != "e"+strconv.Itoa(c.from+i) || l.Log != "b" {
				t.Fatalf("entries/%s: entry %d: %+v %v", c.path, i, l, err)
			}
		}
	}
	for _, p := range []string{"001", "001.p/45", "002.p/1", "x001/000"} {
		if r := env.get("/v1/logs/b/tile/entries/"+p, http.StatusNotFound); !strings.Contains(string(r.body), "beyond the tree") ||
			r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("entries/%s: %v", p, r)
		}
	}
}

// TestStaticHEAD: HEAD answers every static tlog-tiles path (checkpoint,
// hash tiles, entry bundles) with the GET's status and headers and no body.
func TestStaticHEAD(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	seed(t, env, "h", 5)
	for _, p := range []string{"checkpoint", "tile/0/000.p/5", "tile/entries/000.p/5"} {
		// With Accept-Encoding set, the client leaves the answer as sent.
		for _, ae := range []string{"identity", "gzip"} {
			get := env.do(http.MethodGet, "/v1/logs/h/"+p, nil, "Accept-Encoding: "+ae)
			head := env.do(http.MethodHead, "/v1/logs/h/"+p, nil, "Accept-Encoding: "+ae)
			if get.status != http.StatusOK || head.status != http.StatusOK || len(head.body) != 0 {
				t.Errorf("HEAD %s (%s): %v", p, ae, head)
				continue
			}
			for _, h := range []string{"Content-Type", "Cache-Control", "Content-Length", "Content-Encoding", "ETag", "Vary"} {
				if head.header.Get(h) != get.header.Get(h) {
					t.Errorf("HEAD %s (%s): %s %q, GET has %q", p, ae, h, head.header.Get(h), get.header.Get(h))
				}
			}
			if cl := head.header.Get("Content-Length"); cl != strconv.Itoa(len(get.body)) {
				t.Errorf("HEAD %s (%s): Content-Length %q, GET body of %d bytes", p, ae, cl, len(get.body))
			}
		}
	}
	if r := env.do(http.MethodHead, "/v1/logs/h/tile/entries/001", nil); r.status != http.StatusNotFound {
		t.Errorf("HEAD of a bundle beyond the tree: %d", r.status)
	}
}

// TestLeafBound: the ledger refuses an entry whose leaf an entry bundle
// could not carry (over 65,535 bytes) with a 400, and serves one just under.
func TestLeafBound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	// The leaf of this event: 1 + (1+1) + (2+1) + 1 + (2+key) + 8 + 32.
	const overhead = 1 + 2 + 3 + 1 + 2 + 8 + 32
	fits := strings.Repeat("k", merkle.MaxLeafSize-overhead)
	res, _ := env.post("n", "wait=checkpoint", fmt.Sprintf(`{"id":"a","key":%q,"payload":1}`+"\n", fits))
	if len(res.Entries) != 1 {
		t.Fatalf("an event whose leaf is %d bytes was not appended", merkle.MaxLeafSize)
	}
	leaves := splitBundle(t, env.get("/v1/logs/n/tile/entries/000.p/1", http.StatusOK).body)
	if len(leaves) != 1 || len(leaves[0]) != merkle.MaxLeafSize || merkle.LeafHash(leaves[0]) != res.Entries[0].LeafHash {
		t.Fatalf("bundle of the %d-byte leaf: %d entries", merkle.MaxLeafSize, len(leaves))
	}
	r := env.do(http.MethodPost, "/v1/logs/n/entries", strings.NewReader(fmt.Sprintf(`{"id":"b","key":%q,"payload":1}`+"\n", fits+"k")))
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "entry bundle") {
		t.Fatalf("POST of an event whose leaf is one byte over: %v", r)
	}
}

package api_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/merkle"
)

// raw sends a GET with exactly the given headers through a client that
// neither asks for gzip nor decodes it: the answer as the server sent it.
func raw(t *testing.T, env *testEnv, path string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, env.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gzip body: %v", err)
	}
	return out
}

// TestBundleGzip: an entry bundle goes gzip-compressed to a client that
// accepts gzip, and decodes to the bytes a client without Accept-Encoding
// gets as they are; hash tiles are never compressed. Full bundles and the
// partial one past the 256-entry boundary.
func TestBundleGzip(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf(`{"id":"order-%08d","key":"account-%d","payload":{"amount":%d}}`, i, i%17, i))
	}
	res, _ := env.post("z", "wait=checkpoint", ndjson(lines...))
	if len(res.Entries) != 300 {
		t.Fatalf("appended %d entries", len(res.Entries))
	}
	for _, p := range []string{"entries/000", "entries/001.p/44", "entries/000.p/1"} {
		path := "/v1/logs/z/tile/" + p
		plain := raw(t, env, path)
		if plain.status != http.StatusOK || plain.header.Get("Content-Encoding") != "" || plain.header.Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%s without Accept-Encoding: %v, Content-Encoding %q, Vary %q", p, plain, plain.header.Get("Content-Encoding"), plain.header.Get("Vary"))
		}
		leaves := splitBundle(t, plain.body)
		for i, lb := range leaves {
			if merkle.LeafHash(lb) != res.Entries[offsetOf(p)+i].LeafHash {
				t.Fatalf("%s: entry %d does not hash to its leaf", p, i)
			}
		}
		for _, ae := range []string{"gzip", "br, gzip;q=0.5", "*"} {
			gz := raw(t, env, path, "Accept-Encoding", ae)
			if gz.status != http.StatusOK || gz.header.Get("Content-Encoding") != "gzip" || gz.header.Get("Vary") != "Accept-Encoding" {
				t.Fatalf("%s, Accept-Encoding %q: %v, Content-Encoding %q", p, ae, gz, gz.header.Get("Content-Encoding"))
			}
			if cl := gz.header.Get("Content-Length"); cl != fmt.Sprint(len(gz.body)) {
				t.Errorf("%s gzip: Content-Length %s, body %d bytes", p, cl, len(gz.body))
			}
			if got := gunzip(t, gz.body); !bytes.Equal(got, plain.body) {
				t.Fatalf("%s, Accept-Encoding %q: gzip body decodes to %d bytes, not the %d of the bundle", p, ae, len(got), len(plain.body))
			}
			if p == "entries/000" && len(gz.body) >= len(plain.body) {
				t.Errorf("%s: gzip %d bytes, not smaller than %d", p, len(gz.body), len(plain.body))
			}
		}
		for _, ae := range []string{"identity", "gzip;q=0", "deflate, br"} {
			if r := raw(t, env, path, "Accept-Encoding", ae); r.header.Get("Content-Encoding") != "" || !bytes.Equal(r.body, plain.body) {
				t.Errorf("%s, Accept-Encoding %q: Content-Encoding %q, %d bytes", p, ae, r.header.Get("Content-Encoding"), len(r.body))
			}
		}
		// Go's default client asks for gzip and decodes it: what a
		// verifier reading through net/http gets.
		if r := env.get(path, http.StatusOK); !bytes.Equal(r.body, plain.body) {
			t.Errorf("%s through the default client: %d bytes, want %d", p, len(r.body), len(plain.body))
		}
	}
	// Hash tiles are hashes: they go as they are, to any client.
	for _, p := range []string{"0/000", "0/001.p/44", "1/000.p/1"} {
		r := raw(t, env, "/v1/logs/z/tile/"+p, "Accept-Encoding", "gzip")
		if r.status != http.StatusOK || r.header.Get("Content-Encoding") != "" || r.header.Get("Vary") != "" {
			t.Errorf("tile %s with Accept-Encoding gzip: %v, Content-Encoding %q, Vary %q", p, r, r.header.Get("Content-Encoding"), r.header.Get("Vary"))
		}
	}
}

// offsetOf is the index of the first entry of the bundle at p.
func offsetOf(p string) int {
	if p == "entries/001.p/44" {
		return 256
	}
	return 0
}

// TestTileETag: tiles and bundles, full and partial, carry an ETag; a
// request naming it in If-None-Match gets 304 without a body but with the
// ETag and caching headers; one naming another tile's gets the tile; the
// gzip form of a bundle has its own ETag. A tile beyond the tree is a 404
// caches must not keep.
func TestTileETag(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	var lines []string
	for i := range 260 {
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","payload":%d}`, i, i))
	}
	env.post("t", "wait=checkpoint", ndjson(lines...))
	seen := map[string]string{} // ETag: path
	for _, p := range []string{"0/000", "0/001.p/4", "0/001.p/3", "1/000.p/1", "entries/000", "entries/001.p/4"} {
		for _, ae := range []string{"identity", "gzip"} {
			path := "/v1/logs/t/tile/" + p
			first := raw(t, env, path, "Accept-Encoding", ae)
			etag := first.header.Get("ETag")
			if first.status != http.StatusOK || len(etag) < 34 || etag[len(etag)-1] != '"' {
				t.Fatalf("%s (%s): %v, ETag %q", p, ae, first, etag)
			}
			// One ETag per representation: a hash tile is the same bytes
			// to any client, a bundle's gzip form is another.
			if other, dup := seen[etag]; dup && other != p {
				t.Errorf("%s (%s) has the ETag of %s: %s", p, ae, other, etag)
			}
			seen[etag] = p
			if again := raw(t, env, path, "Accept-Encoding", ae); again.header.Get("ETag") != etag {
				t.Errorf("%s (%s): ETag %s then %s", p, ae, etag, again.header.Get("ETag"))
			}
			for _, inm := range []string{etag, `"nope", ` + etag, "*"} {
				r := raw(t, env, path, "Accept-Encoding", ae, "If-None-Match", inm)
				if r.status != http.StatusNotModified || len(r.body) != 0 {
					t.Fatalf("%s (%s), If-None-Match %s: %v, want 304", p, ae, inm, r)
				}
				for _, h := range []string{"ETag", "Cache-Control", "Vary"} {
					if r.header.Get(h) != first.header.Get(h) {
						t.Errorf("%s (%s) 304: %s %q, the 200 had %q", p, ae, h, r.header.Get(h), first.header.Get(h))
					}
				}
			}
			if r := raw(t, env, path, "Accept-Encoding", ae, "If-None-Match", `"0123456789abcdef0123456789abcdef"`); r.status != http.StatusOK || !bytes.Equal(r.body, first.body) {
				t.Errorf("%s (%s), If-None-Match another tag: %v", p, ae, r)
			}
		}
	}
	if len(seen) != 8 {
		t.Errorf("%d ETags for 4 tiles and the 2 forms of 2 bundles", len(seen))
	}
	// A bundle's gzip ETag does not validate the identity form, nor the
	// other way round.
	id := raw(t, env, "/v1/logs/t/tile/entries/000", "Accept-Encoding", "identity")
	gz := raw(t, env, "/v1/logs/t/tile/entries/000", "Accept-Encoding", "gzip")
	if r := raw(t, env, "/v1/logs/t/tile/entries/000", "Accept-Encoding", "identity", "If-None-Match", gz.header.Get("ETag")); r.status != http.StatusOK {
		t.Errorf("identity request with the gzip ETag: %d", r.status)
	}
	if r := raw(t, env, "/v1/logs/t/tile/entries/000", "Accept-Encoding", "gzip", "If-None-Match", id.header.Get("ETag")); r.status != http.StatusOK {
		t.Errorf("gzip request with the identity ETag: %d", r.status)
	}
	for _, p := range []string{"0/001.p/5", "0/002", "entries/001.p/5", "entries/002"} {
		r := raw(t, env, "/v1/logs/t/tile/"+p, "If-None-Match", "*")
		if r.status != http.StatusNotFound || r.header.Get("Cache-Control") != "no-store" || r.header.Get("ETag") != "" {
			t.Errorf("%s beyond the tree: %v, Cache-Control %q, ETag %q", p, r, r.header.Get("Cache-Control"), r.header.Get("ETag"))
		}
	}
}

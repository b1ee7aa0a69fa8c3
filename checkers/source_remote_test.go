package checkers_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// tamperingProxy forwards to backend and rewrites the payload of entry
// index in every entries answer; with consistent it also rewrites the
// entry's leaf and leaf hash to match the new payload, so the entry is
// self-consistent and only the tree can tell.
func tamperingProxy(t *testing.T, backend string, index uint64, consistent bool) *httptest.Server {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target.String()+r.URL.RequestURI(), r.Body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if strings.HasSuffix(r.URL.Path, "/entries") && r.URL.Query().Has("start") && resp.StatusCode == http.StatusOK {
			var page struct {
				Entries []client.Entry `json:"entries"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				t.Errorf("proxy: %v", err)
			}
			for i := range page.Entries {
				e := &page.Entries[i]
				if e.Index != index {
					continue
				}
				p, _ := base64.StdEncoding.DecodeString(*e.PayloadBase64)
				p = append(bytes.Clone(p), '!')
				s := base64.StdEncoding.EncodeToString(p)
				e.PayloadBase64 = &s
				ph := sha256.Sum256(p)
				e.PayloadSHA256 = base64.StdEncoding.EncodeToString(ph[:])
				if consistent {
					lb, err := base64.StdEncoding.DecodeString(e.Leaf)
					if err != nil {
						t.Errorf("proxy: leaf: %v", err)
					}
					var l merkle.Leaf
					if err := l.UnmarshalBinary(lb); err != nil {
						t.Errorf("proxy: leaf: %v", err)
					}
					l.PayloadSHA256 = ph
					nb, _ := l.MarshalBinary()
					e.Leaf = base64.StdEncoding.EncodeToString(nb)
					e.LeafHash = merkle.LeafHash(nb)
				}
			}
			body, _ = json.Marshal(page)
		}
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestScrubRemote scrubs a log through the API of a real server on
// loopback: clean directly, and through a proxy that tampers with one
// entry, naively (its leaf no longer matches its fields) or consistently
// (leaf and leaf hash rewritten to match): the tampered entry is found by
// index both ways.
func TestScrubRemote(t *testing.T) {
	dir, k := smallStore(t)
	st, err := ledger.Open(dir, k.signer, k.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(api.New(st, k.vkey, api.Options{}))
	defer srv.Close()

	c := checkAll(t, checkers.RemoteSource(client.New(srv.URL, k.verifier)), k.verifier)
	if len(c.findings) != 0 || c.entries != smallTotal+300 {
		t.Fatalf("direct: %d entries, findings %v", c.entries, c.findings)
	}
	for _, consistent := range []bool{false, true} {
		proxy := tamperingProxy(t, srv.URL, 3333, consistent)
		c := checkAll(t, checkers.RemoteSource(client.New(proxy.URL, k.verifier)), k.verifier)
		want := []string{"pay leaf_mismatch index=3333"}
		if consistent {
			want = []string{"pay leaf_mismatch index=3333 tile=0/13"}
		}
		if d := describe(c.findings); !slices.Equal(d, want) {
			t.Errorf("consistent tampering %v: findings %q, want %q", consistent, d, want)
		}
	}
}

// TestScrubRemoteEntryRefused scrubs through a proxy that answers 500 for
// entry 3333, alone or in a page, as a server does for an entry missing
// from its storage: the entry is reported missing, and the rest of the log
// is checked (its leaf taken from the tile).
func TestScrubRemoteEntryRefused(t *testing.T) {
	dir, k := smallStore(t)
	st, err := ledger.Open(dir, k.signer, k.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	backend := httptest.NewServer(api.New(st, k.vkey, api.Options{}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		refuse := strings.HasSuffix(r.URL.Path, "/pay/entries/3333")
		if strings.HasSuffix(r.URL.Path, "/pay/entries") && q.Has("start") {
			start, _ := strconv.ParseUint(q.Get("start"), 10, 64)
			end, _ := strconv.ParseUint(q.Get("end"), 10, 64)
			refuse = start <= 3333 && 3333 < end
		}
		if refuse {
			http.Error(w, `{"error":"entry 3333 missing from storage","code":"integrity"}`, http.StatusInternalServerError)
			return
		}
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	c := checkAll(t, checkers.RemoteSource(client.New(proxy.URL, k.verifier)), k.verifier)
	want := []string{"pay entry_missing index=3333"}
	if d := describe(c.findings); !slices.Equal(d, want) {
		t.Errorf("findings %q, want %q", d, want)
	}
	if c.entries != smallTotal+300 {
		t.Errorf("checked %d entries, want %d", c.entries, smallTotal+300)
	}
}

package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/internal/ledgertest"
)

// The POST entries fast path takes exactly the requests the router would
// send to postEntries, so skipping the router changes no answer.
func TestEntriesPathMatchesRouter(t *testing.T) {
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("fastpath.test"))
	s := New(st, key.VKey, Options{Logger: slog.New(slog.DiscardHandler)})
	mux := s.router
	for _, c := range []struct{ method, target string }{
		{"POST", "/v1/logs/l/entries"},
		{"POST", "/v1/logs/a.b-c_d/entries"},
		{"POST", "/v1/logs/l/entries?wait=checkpoint"},
		{"POST", "/v1/logs/bad%20name/entries"},
		{"POST", "/v1/logs/l%2Fx/entries"},
		{"POST", "/v1/logs/l/entries/"},
		{"POST", "/v1/logs//entries"},
		{"POST", "/v1/logs/entries"},
		{"POST", "/v1/logs/l/x/entries"},
		{"POST", "/v1/logs/l/entries/3"},
		{"POST", "/v1/logs/l/entriesx"},
		{"POST", "/v2/logs/l/entries"},
		{"POST", "//v1/logs/l/entries"},
		{"GET", "/v1/logs/l/entries"},
		{"PUT", "/v1/logs/l/entries"},
		{"HEAD", "/v1/logs/l/entries"},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		path := r.URL.Path
		if r.URL.RawPath != "" {
			path = r.URL.RawPath // what chi routes on
		}
		rctx := chi.NewRouteContext()
		routed := mux.Find(rctx, r.Method, path) == entriesRoute && r.Method == http.MethodPost
		name, fast := entriesPath(r)
		if fast && !routed {
			t.Errorf("%s %s: fast path takes it (log %q), the router does not route it to POST entries", c.method, c.target, name)
		}
		if fast && rctx.URLParam("log") != name {
			t.Errorf("%s %s: fast path log %q, router log %q", c.method, c.target, name, rctx.URLParam("log"))
		}
		// Escaped paths and the empty name are left to the router.
		if routed && !fast && r.URL.RawPath == "" && rctx.URLParam("log") != "" {
			t.Errorf("%s %s: routed to POST entries but not taken by the fast path", c.method, c.target)
		}
	}
}

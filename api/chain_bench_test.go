package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
)

// BenchmarkChain measures what the middleware chain costs a request
// without the ledger's work: a POST of entries taken before the router
// (to a log that does not exist: 404 after the chain and the handler's
// first lookup), the same POST routed by chi (an escaped path), and GET
// /healthz through chi. Only the public API is used, so the same file
// measures an older build.
func BenchmarkChain(b *testing.B) {
	st, key := ledgertest.OpenKey(b, ledgertest.WithKeyName("bench.test"))
	srv := api.New(st, key.VKey, api.Options{Logger: slog.New(slog.DiscardHandler)})
	for _, c := range []struct{ name, method, target string }{
		{"post-direct", http.MethodPost, "/v1/logs/nolog/entries"},
		{"post-routed", http.MethodPost, "/v1/logs/no%6Cog/entries"},
		{"healthz", http.MethodGet, "/healthz"},
	} {
		b.Run(c.name, func(b *testing.B) {
			body := strings.NewReader(`{"payload":1}`)
			req := httptest.NewRequest(c.method, c.target, body)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				body.Seek(0, 0)
				clear(w.h)
				w.code = 0
				srv.ServeHTTP(w, req)
			}
			if w.code == 0 || w.code >= 500 {
				b.Fatalf("%s %s: %d", c.method, c.target, w.code)
			}
		})
	}
}

// discard is a ResponseWriter that keeps only the status code.
type discard struct {
	h    http.Header
	code int
}

func (w *discard) Header() http.Header { return w.h }
func (w *discard) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *discard) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}

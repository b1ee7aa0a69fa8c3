package api

import (
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/auditd/auditd/internal/ledgertest"
)

// TestEveryRouteDocumented: docs/api.md names every route the server
// serves, as "METHOD /path" with the path's parameters in braces (a
// trailing wildcard matches any documented path below it).
func TestEveryRouteDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("routes.test"))
	s := New(st, key.VKey, Options{Components: Components{Metrics: promhttp.Handler()}, Logger: slog.New(slog.DiscardHandler)})
	n := 0
	err = chi.Walk(s.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		n++
		p := strings.TrimSuffix(strings.TrimSuffix(route, "*"), "/")
		if p == "" {
			p = "/"
		}
		if method == http.MethodHead { // documented with its GET: "answer GET and HEAD"
			if !strings.Contains(string(doc), "`GET` and `HEAD`") {
				t.Errorf("docs/api.md does not say which paths answer HEAD (%s)", route)
			}
			method = http.MethodGet
		}
		if !strings.Contains(string(doc), method+" "+p) {
			t.Errorf("docs/api.md does not document %s %s (looked for %q)", method, route, method+" "+p)
		}
		return nil
	})
	if err != nil || n < 15 {
		t.Fatalf("walked %d routes: %v", n, err)
	}
}

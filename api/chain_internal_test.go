package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/auditd/auditd/internal/ledgertest"
)

// TestChainPanics: a panic on a route chi serves and on the POST entries
// route dispatch takes before the router runs through the same chain: a
// 500, the panic logged with its stack, and the request counted as a 500
// under its route.
func TestChainPanics(t *testing.T) {
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("chain.test"))
	var logs bytes.Buffer
	s := New(st, key.VKey, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.router.Get("/panic", func(http.ResponseWriter, *http.Request) { panic("boom on a routed path") })
	s.postHandler = s.auth(true)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom on the direct path") }))
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, c := range []struct{ method, path, route, msg string }{
		{http.MethodGet, "/panic", "/panic", "boom on a routed path"},
		{http.MethodPost, "/v1/logs/l/entries", entriesRoute, "boom on the direct path"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusInternalServerError {
			t.Errorf("%s %s: %d, want 500", c.method, c.path, res.StatusCode)
		}
		if n := counted(t, s.requests.WithLabelValues(c.route, c.method, "500")); n != 1 {
			t.Errorf("%s %s: counted %v times as a 500 under %s", c.method, c.path, n, c.route)
		}
		if !strings.Contains(logs.String(), c.msg) || !strings.Contains(logs.String(), "panic serving a request") {
			t.Errorf("%s %s: panic not logged: %s", c.method, c.path, logs.String())
		}
	}
}

// TestChainRoutes: POST entries is counted under the same route whether
// dispatch takes it (an unescaped path) or chi routes it (an escaped one),
// and a request no route matches under "unmatched".
func TestChainRoutes(t *testing.T) {
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("chain.test"))
	s := New(st, key.VKey, Options{Logger: slog.New(slog.DiscardHandler)})
	for _, c := range []struct{ method, target, route, code string }{
		{http.MethodPost, "/v1/logs/nolog/entries", entriesRoute, "404"},
		{http.MethodPost, "/v1/logs/no%6Cog/entries", entriesRoute, "404"},
		{http.MethodGet, "/nowhere", "unmatched", "404"},
	} {
		before := counted(t, s.requests.WithLabelValues(c.route, c.method, c.code))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(c.method, c.target, strings.NewReader(`{"payload":1}`)))
		if w.Code != http.StatusNotFound {
			t.Errorf("%s %s: %d", c.method, c.target, w.Code)
		}
		if n := counted(t, s.requests.WithLabelValues(c.route, c.method, c.code)) - before; n != 1 {
			t.Errorf("%s %s: counted %v times under %s %s", c.method, c.target, n, c.route, c.code)
		}
	}
}

// counted returns the value of a counter.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

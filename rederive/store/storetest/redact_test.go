package storetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive/store"
)

// TestStoreErrorsHidePassword (issue 28): a store error, which a run's
// report, the store_error alert and its webhook carry, never shows the
// password of the configured URL or DSN: HTTP stores whose URL or
// watermark URL answers 500, is down or does not parse; PostgreSQL DSNs
// (URL and key=value) that cannot connect. (A Redis password is a field
// of its own, never in a message.)
func TestStoreErrorsHidePassword(t *testing.T) {
	const secret = "s3cr3t-PASS"
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/rows":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"key":"a","v":1}]`))
		default:
			http.Error(w, "database is down", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	auth := func(u string) string { return strings.Replace(u, "http://", "http://auditor:"+secret+"@", 1) }
	for _, tc := range []struct {
		name  string
		c     store.Config
		marks bool
	}{
		{"http 500", store.Config{HTTP: &store.HTTPConfig{URL: auth(srv.URL) + "/500"}}, false},
		{"http token in the query", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/500?token=" + secret}}, false},
		{"http unreachable", store.Config{HTTP: &store.HTTPConfig{URL: auth(closed.URL) + "/rows"}}, false},
		{"http bad port", store.Config{HTTP: &store.HTTPConfig{URL: auth(closed.URL) + ":x/rows"}}, false},
		{"http watermarks 500", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/rows", WatermarkURL: auth(srv.URL) + "/500"}}, true},
		{"postgres url unreachable", store.Config{Postgres: &store.PostgresConfig{DSN: "postgres://postgres:" + secret + "@127.0.0.1:1/test?sslmode=disable", Table: "t"}}, false},
		{"postgres key=value unreachable", store.Config{Postgres: &store.PostgresConfig{DSN: "host=127.0.0.1 port=1 user=postgres password=" + secret + " dbname=test sslmode=disable", Table: "t"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(ctx, tc.c)
			if err == nil {
				defer s.Close()
				if tc.marks {
					_, _, err = s.Watermarks(ctx)
				} else {
					err = s.Scan(ctx, func(store.Row) error { return nil })
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			t.Logf("%v", err)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
	// Opening the store refuses a bad format naming the URL without its
	// password.
	_, err := store.Open(ctx, store.Config{HTTP: &store.HTTPConfig{URL: auth(srv.URL), Format: "xml"}})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "auditor:xxxxx@") {
		t.Errorf("open error %v: want the URL without its password", err)
	}
}

package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
)

// Item 8: a read token alone must not leave writes open. A POST of entries
// and a POST of a derivation run without a token are refused; with the read
// token (the only credential there is) the entry is appended.
func TestReadTokenAloneProtectsWrites(t *testing.T) {
	e := newTestEnv(t, envConfig{opts: api.Options{CreateLogs: true, ReadToken: "r3ad"}})
	for _, path := range []string{"/v1/logs/l/entries", "/v1/derivations/d/run"} {
		r := e.do(http.MethodPost, path, strings.NewReader(`{"id":"a","payload":1}`))
		if r.status != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: got %v, want 401", path, r)
		}
		r = e.do(http.MethodPost, path, strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer wrong")
		if r.status != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token: got %v, want 401", path, r)
		}
	}
	r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer r3ad")
	if r.status != http.StatusOK {
		t.Fatalf("POST with the read token: got %v, want 200", r)
	}
	// With both tokens, the read token does not write.
	e2 := newTestEnv(t, envConfig{opts: api.Options{CreateLogs: true, ReadToken: "r3ad", WriteToken: "wr1te"}})
	if r := e2.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer r3ad"); r.status != http.StatusUnauthorized {
		t.Errorf("POST with the read token when a write token is set: got %v, want 401", r)
	}
}

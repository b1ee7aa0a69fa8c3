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

// Item 1: two ids that differ only in their invalid bytes are both refused
// (400 with the line) instead of colliding on U+FFFD; an empty id is 400.
func TestPostRefusesInvalidUTF8IDs(t *testing.T) {
	e := newTestEnv(t, envConfig{opts: api.Options{CreateLogs: true}})
	e.post("l", "", `{"id":"x","payload":1}`)
	for _, body := range []string{
		`{"id":"y","payload":1}` + "\n" + `{"id":"bad` + "\xff\xfe" + `id","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"bad` + "\xc0\xaf" + `id","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"k","key":"` + "\xff" + `","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"","payload":1}`,
	} {
		r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(body))
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"line":2`) {
			t.Errorf("POST %q: got %v, want 400 naming line 2", body, r)
		}
	}
	if got := e.logsSnapshot(); !strings.Contains(got, `"size":1`) {
		t.Errorf("a refused POST appended: %s", got)
	}
}

package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/auditd/auditd/api"
)

// TestSetAuth: tokens swapped while the server runs (a configuration
// reload) apply to the next request on every path: POST entries taken
// before the router and routed by chi, reads, and what /readyz tells an
// unauthenticated caller. Clearing them opens the server again.
func TestSetAuth(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true},
		Components: api.Components{Ready: api.ReadyFunc(func() error { return errors.New("broker secret-topic.0 unreachable") })}}})
	post := func(path, token string) int {
		var h []string
		if token != "" {
			h = append(h, "Authorization: Bearer "+token)
		}
		return env.do(http.MethodPost, path, strings.NewReader(`{"payload":1}`), h...).status
	}
	get := func(path, token string) response {
		var h []string
		if token != "" {
			h = append(h, "Authorization: Bearer "+token)
		}
		return env.do(http.MethodGet, path, nil, h...)
	}
	const direct, routed = "/v1/logs/l/entries", "/v1/logs/%6C/entries" // the same log; chi routes the escaped path
	check := func(stage string, writeOpen, readOpen bool, token string) {
		t.Helper()
		if got, want := post(direct, ""), map[bool]int{true: 200, false: 401}[writeOpen]; got != want {
			t.Errorf("%s: POST %s without a token: %d, want %d", stage, direct, got, want)
		}
		if got := post(routed, ""); (got == http.StatusUnauthorized) == writeOpen {
			t.Errorf("%s: POST %s without a token: %d", stage, routed, got)
		}
		if got := get("/v1/logs", "").status; (got == http.StatusOK) != readOpen {
			t.Errorf("%s: GET /v1/logs without a token: %d", stage, got)
		}
		if r := get("/readyz", ""); strings.Contains(string(r.body), "secret-topic") != readOpen {
			t.Errorf("%s: /readyz without a token: %s", stage, r.body)
		}
		if token != "" {
			if got := post(direct, token); got != http.StatusOK {
				t.Errorf("%s: POST %s with the token: %d", stage, direct, got)
			}
			if got := post(routed, token); got == http.StatusUnauthorized {
				t.Errorf("%s: POST %s with the token: %d", stage, routed, got)
			}
			if got := get("/v1/logs", token).status; got != http.StatusOK {
				t.Errorf("%s: GET /v1/logs with the token: %d", stage, got)
			}
		}
	}
	check("open", true, true, "")
	env.server.SetAuth(api.Tokens{Write: "w2"})
	check("write token", false, true, "w2")
	env.server.SetAuth(api.Tokens{Write: "w3", Read: "r3"})
	check("both tokens", false, false, "w3")
	if got := post(direct, "w2"); got != http.StatusUnauthorized {
		t.Errorf("the replaced write token still writes: %d", got)
	}
	env.server.SetAuth(nil)
	check("cleared", true, true, "")
}

// TestSetAuthConcurrent swaps the tokens while requests run (run it with
// -race): each request is judged by one of the two, never a mix.
func TestSetAuthConcurrent(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Write: "a"}}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			env.server.SetAuth(api.Tokens{Write: []string{"a", "b"}[i%2]})
		}
	}()
	for range 200 {
		r := env.do(http.MethodPost, "/v1/logs/c/entries", strings.NewReader(`{"payload":1}`), "Authorization: Bearer a")
		if r.status != http.StatusOK && r.status != http.StatusUnauthorized {
			t.Errorf("POST during swaps: %v", r)
		}
	}
	cancel()
	wg.Wait()
	env.server.SetAuth(api.Tokens{Write: "a"})
	if r := env.do(http.MethodPost, "/v1/logs/c/entries", strings.NewReader(`{"payload":1}`), "Authorization: Bearer a"); r.status != http.StatusOK {
		t.Errorf("after the swaps: %v", r)
	}
}

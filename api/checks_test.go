package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// hookChecker is a Checker whose pass is a hook.
type hookChecker struct {
	name string
	run  func(ctx context.Context, p checkers.Progress) error
}

func (c *hookChecker) Name() string { return c.name }
func (c *hookChecker) Run(ctx context.Context, p checkers.Progress) error {
	return c.run(ctx, p)
}

// checkStatus is the JSON of one checker in GET /v1/checks.
type checkStatus struct {
	Name            string  `json:"name"`
	Interval        string  `json:"interval"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Rate            float64 `json:"rate"`
	State           string  `json:"state"`
	LastRun         *struct {
		StartedAt       time.Time `json:"started_at"`
		EndedAt         time.Time `json:"ended_at"`
		DurationSeconds float64   `json:"duration_seconds"`
		EntriesChecked  uint64    `json:"entries_checked"`
		Result          string    `json:"result"`
		Error           string    `json:"error"`
	} `json:"last_run"`
	LastError string             `json:"last_error"`
	Findings  []checkers.Finding `json:"findings"`
}

// newChecksEnv serves a Runner, whose records are in a bucket of the
// server's own store, with two checkers: "checkpoints" finds nothing;
// "scrub" finds one finding on its first pass and fails on the next ones.
func newChecksEnv(t *testing.T, opts api.Options) (*testEnv, *checkers.Runner, chan struct{}) {
	env := newTestEnv(t, envConfig{})
	kv, err := env.store.Bucket("checks")
	if err != nil {
		t.Fatal(err)
	}
	r := checkers.NewRunner(kv, checkers.Options{Logger: slog.New(slog.DiscardHandler)})
	ran := make(chan struct{}, 4)
	fail := false
	err = r.Register(&hookChecker{name: "scrub", run: func(ctx context.Context, p checkers.Progress) error {
		defer func() { ran <- struct{}{} }()
		if err := p.Checked(ctx, 2048); err != nil {
			return err
		}
		if fail {
			return errors.New("tile 0/3 unreadable")
		}
		fail = true
		p.Found(checkers.Finding{Log: "orders", Index: checkers.At(1000), Kind: ledger.IntegrityLeafMismatch, Detail: "payload hash differs"})
		return nil
	}}, checkers.Schedule{Interval: 24 * time.Hour, Rate: 50000})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Register(&hookChecker{name: "checkpoints", run: func(context.Context, checkers.Progress) error { return nil }}, checkers.Schedule{}); err != nil {
		t.Fatal(err)
	}
	opts.Components.Checks, opts.Logger = r, slog.New(slog.DiscardHandler)
	env.server = api.New(env.store, env.vkey, opts)
	env.http.Close() // newTestEnv's, serving a server without checks
	env.http = httptest.NewServer(env.server)
	t.Cleanup(env.http.Close)
	return env, r, ran
}

func TestChecksList(t *testing.T) {
	t.Parallel()
	env, r, _ := newChecksEnv(t, api.Options{})
	var out struct {
		Checks []checkStatus `json:"checks"`
	}
	env.getJSON("/v1/checks", &out)
	if len(out.Checks) != 2 || out.Checks[0].Name != "checkpoints" || out.Checks[1].Name != "scrub" {
		t.Fatalf("checks before any pass: %+v", out.Checks)
	}
	if c := out.Checks[0]; c.Interval != "on-demand" || c.IntervalSeconds != 0 {
		t.Errorf("on-demand checker's interval: %q (%v s), want \"on-demand\" (0 s)", c.Interval, c.IntervalSeconds)
	}
	s := out.Checks[1]
	if s.State != "idle" || s.LastRun != nil || s.Findings == nil || len(s.Findings) != 0 ||
		s.Interval != "24h0m0s" || s.IntervalSeconds != 86400 || s.Rate != 50000 {
		t.Errorf("scrub before any pass: %+v (findings must be [], not null)", s)
	}

	if _, err := r.RunNow(context.Background(), "scrub"); err != nil {
		t.Fatal(err)
	}
	var one checkStatus
	env.getJSON("/v1/checks/scrub", &one)
	if one.LastRun == nil || one.LastRun.Result != "findings" || one.LastRun.EntriesChecked != 2048 ||
		one.LastRun.EndedAt.Before(one.LastRun.StartedAt) || len(one.Findings) != 1 {
		t.Fatalf("scrub after a pass: %+v", one)
	}
	if f := one.Findings[0]; f.Log != "orders" || f.Index == nil || *f.Index != 1000 || f.Kind != "leaf_mismatch" || f.Detail == "" {
		t.Errorf("finding %+v", f)
	}

	// A failing pass: the error shows, the completed pass's findings stay.
	if _, err := r.RunNow(context.Background(), "scrub"); err == nil {
		t.Fatal("no error")
	}
	env.getJSON("/v1/checks/scrub", &one)
	if one.LastRun.Result != "error" || !strings.Contains(one.LastError, "tile 0/3 unreadable") || len(one.Findings) != 1 {
		t.Errorf("scrub after a failed pass: %+v", one)
	}
	r404 := env.get("/v1/checks/nope", http.StatusNotFound)
	if !strings.Contains(string(r404.body), `"unknown_check"`) {
		t.Errorf("unknown checker: %v", r404)
	}
}

func TestChecksRun(t *testing.T) {
	t.Parallel()
	env, r, ran := newChecksEnv(t, api.Options{Auth: api.Tokens{Write: "w", Read: "r"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if res := env.do(http.MethodPost, "/v1/checks/scrub/run", nil, "Authorization: Bearer r"); res.status != http.StatusUnauthorized {
		t.Errorf("POST run with the read token: %v", res)
	}
	if res := env.do(http.MethodGet, "/v1/checks", nil); res.status != http.StatusUnauthorized {
		t.Errorf("GET without a token: %v", res)
	}
	if res := env.do(http.MethodPost, "/v1/checks/nope/run", nil, "Authorization: Bearer w"); res.status != http.StatusNotFound {
		t.Errorf("POST run of an unknown checker: %v", res)
	}
	res := env.do(http.MethodPost, "/v1/checks/scrub/run", nil, "Authorization: Bearer w")
	if res.status != http.StatusAccepted {
		t.Fatalf("POST run: %v", res)
	}
	var body map[string]string
	if err := json.Unmarshal(res.body, &body); err != nil || body["status"] != "queued" || body["status_url"] != "/v1/checks/scrub" {
		t.Errorf("POST run body %s (%v)", res.body, err)
	}
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("the queued pass did not run")
	}
	env.token = "r"
	deadline := time.Now().Add(20 * time.Second)
	for {
		var one checkStatus
		env.getJSON("/v1/checks/scrub", &one)
		if one.LastRun != nil {
			if len(one.Findings) != 1 {
				t.Errorf("after the triggered pass: %+v", one)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the triggered pass was never recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestChecksDisabled(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{})
	for _, p := range []string{"/v1/checks", "/v1/checks/scrub"} {
		if r := env.get(p, http.StatusNotFound); !strings.Contains(string(r.body), `"checks_disabled"`) {
			t.Errorf("GET %s without checks: %v", p, r)
		}
	}
}

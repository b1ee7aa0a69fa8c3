package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/spec"
)

// TestServeLoadsDerivationsOnce: serve with a derivation that has
// invariants and whose source has a retention policy (the three consumers
// of the compiled derivations beside the start-up check) loads and
// compiles the spec files once. Before, serve loaded them five times and
// compiled each spec nine times.
func TestServeLoadsDerivationsOnce(t *testing.T) {
	dir := t.TempDir()
	specFile := filepath.Join(dir, "bal.yaml")
	if err := os.WriteFile(specFile, []byte(`derivations:
  - name: bal
    sources: [pay]
    store: {file: {path: `+filepath.Join(dir, "bal.jsonl")+`}}
    key: event.acct
    initial: "0"
    step: state + 1
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	defer func(f func(...string) ([]rederive.Job, []*spec.Warning, error)) { loadJobs = f }(loadJobs)
	loadJobs = func(files ...string) ([]rederive.Job, []*spec.Warning, error) {
		calls.Add(1)
		return rederive.LoadJobs(files...)
	}
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = filepath.Join(dir, "data"), "127.0.0.1:0"
	cfg.Derivations = []string{specFile}
	cfg.Checks.Invariants = InvariantsConfig{Derivations: map[string][]rederive.InvariantSpec{
		"bal": {{Name: "non_negative", PerKey: "state >= 0"}}}}
	cfg.Retention = RetentionConfig{Interval: time.Hour, Logs: []RetentionLogConfig{{Log: "pay", KeepEntries: 10}}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	// The three consumers got the jobs: the daemon lists the derivation
	// and the invariant check is registered.
	var ds struct {
		Derivations []struct{ Name string } `json:"derivations"`
	}
	getJSONHTTP(t, "http://"+addr+"/v1/derivations", &ds)
	var inv map[string]any
	getJSONHTTP(t, "http://"+addr+"/v1/checks/invariants", &inv)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if len(ds.Derivations) != 1 || ds.Derivations[0].Name != "bal" {
		t.Fatalf("derivations %+v", ds)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("serve loaded the derivation spec files %d times, want once", n)
	}
}

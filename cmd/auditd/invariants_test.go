package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// TestDaemonInvariants runs the daemon with a derivation and an invariant
// over its state, checked after each derivation run only (no schedule of
// its own): a key driven negative by the ledger's events is raised as an
// integrity alert of kind invariant naming the key.
func TestDaemonInvariants(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "bal.yaml")
	if err := os.WriteFile(spec, []byte(`derivations:
  - name: bal
    sources: [pay]
    store: {file: {path: `+filepath.Join(dir, "bal.jsonl")+`}}
    key: event.acct
    initial: "0.0"
    step: state + double(event.amount)
    interval: 100ms
    full_interval: 1s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bal.jsonl"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = filepath.Join(dir, "data"), "127.0.0.1:0"
	cfg.CheckpointInterval = 10 * time.Millisecond
	cfg.Derivations = []string{spec}
	cfg.Checks.Invariants = InvariantsConfig{Interval: 0, Derivations: map[string][]rederive.InvariantSpec{
		"bal": {{Name: "non_negative", PerKey: "state >= 0.0"}}}}
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
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	url := "http://" + addr
	post(t, url+"/v1/logs/pay/entries?wait=checkpoint", `{"id":"1","time":"2026-01-01T00:00:00Z","payload":{"acct":"a","amount":5}}
{"id":"2","time":"2026-01-01T00:00:01Z","payload":{"acct":"b","amount":3}}
{"id":"3","time":"2026-01-01T00:00:02Z","payload":{"acct":"b","amount":-7}}
`)
	a := getAlertHTTP(t, url+"/v1/alerts/integrity/checks/invariants/bal/invariant")
	if a.State != "firing" || a.Labels["severity"] != "critical" || !strings.Contains(string(a.Details), `key \"b\"`) || strings.Contains(string(a.Details), `key \"a\"`) {
		t.Fatalf("alert %+v %s", a, a.Details)
	}
	// The finding, in the alert and in GET /v1/checks/invariants, names
	// the key and carries its events with their proofs in the signed
	// checkpoint the run was pinned at.
	var d struct {
		Findings []checkers.Finding `json:"findings"`
	}
	if err := json.Unmarshal(a.Details, &d); err != nil || len(d.Findings) != 1 {
		t.Fatalf("details %s (%v)", a.Details, err)
	}
	var st struct {
		Findings []checkers.Finding `json:"findings"`
	}
	getJSONHTTP(t, url+"/v1/checks/invariants", &st)
	for _, f := range [][]checkers.Finding{d.Findings, st.Findings} {
		if len(f) != 1 || f[0].Key != "b" || len(f[0].Lineage) != 2 || len(f[0].Evidence) != 1 ||
			f[0].Lineage[0].ID != "2" || f[0].Lineage[1].ID != "3" || f[0].Lineage[1].TreeSize != 3 ||
			!strings.Contains(f[0].Evidence[0], "/pay\n3\n") {
			t.Fatalf("finding %+v", f)
		}
		for _, e := range f[0].Lineage {
			if len(e.Proof) == 0 {
				t.Fatalf("entry %d without its inclusion proof", e.Index)
			}
		}
	}
}

func getJSONHTTP(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
}

// TestInvariantsConfig: an invariant of an unknown derivation, or one that
// does not compile, keeps the daemon from starting.
func TestInvariantsConfig(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "bal.yaml")
	if err := os.WriteFile(spec, []byte("derivations:\n  - name: bal\n    sources: [pay]\n    store: {file: {path: x.jsonl}}\n    key: event.acct\n    initial: \"0\"\n    step: state + 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  InvariantsConfig
		ok   bool
	}{
		{"good", InvariantsConfig{Derivations: map[string][]rederive.InvariantSpec{"bal": {{Name: "n", PerKey: "state >= 0"}}}}, true},
		{"none", InvariantsConfig{}, true},
		{"unknown derivation", InvariantsConfig{Derivations: map[string][]rederive.InvariantSpec{"nope": {{Name: "n", PerKey: "state >= 0"}}}}, false},
		{"bad expression", InvariantsConfig{Derivations: map[string][]rederive.InvariantSpec{"bal": {{Name: "n", PerKey: "state >="}}}}, false},
	} {
		st := newTestStore(t)
		jobs, _, err := loadJobs(spec)
		if err != nil {
			t.Fatal(err)
		}
		_, err = invariantCheckers(st, nil, jobs, tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func newTestStore(t *testing.T) *ledger.Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "inv.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestInvariantsConfigPosition: an invariant of the configuration file
// that does not compile keeps the daemon from starting with an error that
// names the file, line and column of the offending token, as derivation
// spec errors do.
func TestInvariantsConfigPosition(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "bal.yaml")
	if err := os.WriteFile(spec, []byte("derivations:\n  - name: bal\n    sources: [pay]\n    store: {file: {path: x.jsonl}}\n    key: event.acct\n    initial: \"0\"\n    step: state + 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "auditd.yaml")
	if err := os.WriteFile(path, []byte(`derivations: [`+spec+`]
checks:
  invariants:
    derivations:
      bal:
        - name: non_negative
          per_key: state >= 0
        - name: total
          all: sum(value) == 0
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := loadJobs(cfg.Derivations...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = invariantCheckers(newTestStore(t), nil, jobs, cfg.Checks.Invariants)
	// "value" is line 9, column 20.
	if want := path + ":9:20: invariant total of bal: "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v, want it to start with %q", err, want)
	}
	if !strings.Contains(err.Error(), "undeclared reference to 'value'") {
		t.Fatalf("error %v does not say what is wrong", err)
	}
}

package rederive

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
)

// TestRaiseAlerts checks the report -> alert policy over a real alert
// manager: confirmed drift fires a drift alert whose details carry at most
// maxAlertDrift keys, a store error fires its own alert and leaves the
// drift alert as it was, a clean full run resolves everything, and an
// incremental fold that disagrees with the full one fires an integrity
// alert.
func TestRaiseAlerts(t *testing.T) {
	lg := newRTLedger(t)
	kv, err := lg.store.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(kv, alert.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	firing := func(kind alert.Kind) []alert.Alert {
		return m.List(alert.Filter{State: alert.StateFiring, Kind: kind, Subject: "bal"})
	}

	drift := &Report{Derivation: "bal", Mode: "incremental", State: StateDrift, Confirmed: 30}
	for i := range 30 {
		drift.Drift = append(drift.Drift, DriftReport{Drift: compare.Drift{Key: string(rune('a' + i)), Kind: compare.DriftMismatch}, Status: "confirmed"})
	}
	if err := RaiseAlerts(m, drift); err != nil {
		t.Fatal(err)
	}
	fired := firing(alert.KindDrift)
	if len(fired) != 1 || fired[0].ID != "drift/bal" {
		t.Fatalf("drift alerts after a drifting run: %+v", fired)
	}
	var details struct {
		Drift []json.RawMessage `json:"drift"`
	}
	if err := json.Unmarshal(fired[0].Details, &details); err != nil || len(details.Drift) != maxAlertDrift {
		t.Errorf("drift alert details hold %d keys (%v), want %d", len(details.Drift), err, maxAlertDrift)
	}

	storeDown := &Report{Derivation: "bal", Mode: "incremental", State: StateError, ErrorKind: ErrKindStore, Error: "connection refused"}
	if err := RaiseAlerts(m, storeDown); err != nil {
		t.Fatal(err)
	}
	if got := firing(alert.KindStoreError); len(got) != 1 {
		t.Errorf("store error alerts after a store error: %+v", got)
	}
	if got := firing(alert.KindDrift); len(got) != 1 {
		t.Errorf("a run in error resolved the drift alert: %+v", got)
	}
	if got := firing(alert.KindDerivationError); len(got) != 0 {
		t.Errorf("a store error fired a derivation error: %+v", got)
	}

	mismatch := &Report{Derivation: "bal", Mode: "full", State: StateClean, IncrementalMismatch: []string{"a"}}
	if err := RaiseAlerts(m, mismatch); err != nil {
		t.Fatal(err)
	}
	if got := firing(alert.KindIntegrity); len(got) != 1 || got[0].ID != "integrity/derivation/bal" {
		t.Errorf("integrity alerts after an incremental mismatch: %+v", got)
	}
	for _, k := range []alert.Kind{alert.KindDrift, alert.KindStoreError} {
		if got := firing(k); len(got) != 0 {
			t.Errorf("%s alerts after a clean run: %+v", k, got)
		}
	}

	clean := &Report{Derivation: "bal", Mode: "full", State: StateClean}
	if err := RaiseAlerts(m, clean); err != nil {
		t.Fatal(err)
	}
	if got := firing(""); len(got) != 0 {
		t.Errorf("alerts after a clean full run: %+v", got)
	}
}

// TestDriftAlertSeverity: drift takes the severity of its derivation's
// spec (here critical, against an empty store), the other alerts of a
// derivation that of their kind.
func TestDriftAlertSeverity(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	lg.append(t, "payments", rtTransfers(3, 20, 4, "acct-"))
	path := filepath.Join(t.TempDir(), "balances.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sp := rtSpec("bal", store.Config{File: &store.FileConfig{Path: path}})
	sp.Severity = "critical"
	rep := rtRun(t, lg.runner(nil), rtJob(t, sp), false)
	if rep.State != StateDrift || rep.Severity != "critical" {
		t.Fatalf("run: state %s severity %q, want drift and critical", rep.State, rep.Severity)
	}
	kv, err := lg.store.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(kv, alert.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	severity := func(kind alert.Kind) string {
		got := m.List(alert.Filter{State: alert.StateFiring, Kind: kind, Subject: "bal"})
		if len(got) != 1 {
			t.Fatalf("%s alerts: %+v, want one", kind, got)
		}
		return got[0].Labels["severity"]
	}
	if err := RaiseAlerts(m, rep); err != nil {
		t.Fatal(err)
	}
	if got := severity(alert.KindDrift); got != "critical" {
		t.Errorf("drift of a critical derivation: severity %q", got)
	}
	for _, c := range []struct {
		rep  *Report
		kind alert.Kind
		want string
	}{
		{&Report{Derivation: "bal", Mode: "incremental", State: StateError, ErrorKind: ErrKindStore, Error: "down", Severity: "critical"}, alert.KindStoreError, "warning"},
		{&Report{Derivation: "bal", Mode: "incremental", State: StateError, ErrorKind: ErrKindDerivation, Error: "budget", Severity: "critical"}, alert.KindDerivationError, "warning"},
		{&Report{Derivation: "bal", Mode: "full", State: StateClean, IncrementalMismatch: []string{"a"}}, alert.KindIntegrity, "critical"},
		{&Report{Derivation: "bal", Mode: "incremental", State: StateDrift, Confirmed: 1}, alert.KindDrift, "warning"},
	} {
		if err := RaiseAlerts(m, c.rep); err != nil {
			t.Fatal(err)
		}
		if got := severity(c.kind); got != c.want {
			t.Errorf("%s alert: severity %q, want %s", c.kind, got, c.want)
		}
	}
}

// TestAlertSummaryCounts: a count of one reads "1 key", not "1 keys".
func TestAlertSummaryCounts(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	kv, err := lg.store.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(kv, alert.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for _, c := range []struct {
		rep  *Report
		kind alert.Kind
		want string
	}{
		{&Report{Derivation: "one", Mode: "full", State: StateDrift, Confirmed: 1, Stats: compare.Stats{Missing: 1}, IncrementalMismatch: []string{"a"}},
			alert.KindDrift, "derivation one: 1 key drifted from the ledger (1 missing, 0 extra, 0 mismatched)"},
		{nil, alert.KindIntegrity, "derivation one: the incremental state differs from a full fold on 1 key"},
		{&Report{Derivation: "two", Mode: "full", State: StateDrift, Confirmed: 2, Stats: compare.Stats{Extra: 2}},
			alert.KindDrift, "derivation two: 2 keys drifted from the ledger (0 missing, 2 extra, 0 mismatched)"},
	} {
		if c.rep != nil {
			if err := RaiseAlerts(m, c.rep); err != nil {
				t.Fatal(err)
			}
		}
		subject := "one"
		if c.rep != nil {
			subject = c.rep.Derivation
		}
		got := m.List(alert.Filter{State: alert.StateFiring, Kind: c.kind, Subject: subject})
		if len(got) != 1 || got[0].Summary != c.want {
			t.Errorf("%s alert of %s: %+v, want summary %q", c.kind, subject, got, c.want)
		}
	}
}

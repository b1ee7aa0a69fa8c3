package rederive

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/rederive/compare"
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

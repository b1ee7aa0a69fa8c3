package rederive

import (
	"encoding/json"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/internal/plural"
)

// AlertSyncer keeps the set of firing alerts of one kind and subject:
// Sync fires each alert of firing and resolves every other firing alert
// of that kind and subject (an empty firing resolves them all), changing
// nothing if any alert is invalid. *alert.Manager is one.
type AlertSyncer interface {
	Sync(kind alert.Kind, subject string, firing []alert.Alert) error
}

var _ AlertSyncer = (*alert.Manager)(nil)

// maxAlertDrift bounds the drifted keys an alert's details carry; the full
// report is at /v1/derivations/{name}/runs/latest.
const maxAlertDrift = 20

// RaiseAlerts turns a run's report into alerts: confirmed drift, a
// store error, a derivation error, an incremental fold that disagrees with
// the full one. A condition the report no longer shows resolves; a run in
// error says nothing about drift, so drift alerts stay as they were.
//
// Drift takes the severity of the derivation's spec (rep.Severity); the
// errors are warnings and an incremental mismatch is critical (the
// defaults of their kinds).
func RaiseAlerts(m AlertSyncer, rep *Report) error {
	name := rep.Derivation
	details := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	var errs []error
	sync := func(kind alert.Kind, firing ...alert.Alert) {
		if err := m.Sync(kind, name, firing); err != nil {
			errs = append(errs, err)
		}
	}
	if rep.State != StateError {
		if rep.State == StateDrift {
			drift := rep.Drift
			if len(drift) > maxAlertDrift {
				drift = drift[:maxAlertDrift]
			}
			sync(alert.KindDrift, alert.Drift(name, rep.Severity, plural.N(rep.Confirmed, "key", "keys"),
				rep.Stats.Missing, rep.Stats.Extra, rep.Stats.Mismatched,
				details(map[string]any{"pins": rep.Pins, "confirmed": rep.Confirmed, "pending": rep.Pending,
					"drift": drift, "report": "/v1/derivations/" + name + "/runs/latest"})))
		} else {
			sync(alert.KindDrift)
		}
	}
	if rep.State == StateError && rep.ErrorKind == ErrKindStore {
		sync(alert.KindStoreError, alert.StoreError(name, rep.Error, details(map[string]any{"error": rep.Error})))
	} else {
		sync(alert.KindStoreError)
	}
	if rep.State == StateError && rep.ErrorKind != ErrKindStore {
		sync(alert.KindDerivationError, alert.DerivationError(name, rep.ErrorKind, rep.Error,
			details(map[string]any{"kind": rep.ErrorKind, "error": rep.Error, "errors": rep.Errors})))
	} else {
		sync(alert.KindDerivationError)
	}
	if len(rep.IncrementalMismatch) > 0 {
		sync(alert.KindIntegrity, alert.IncrementalMismatch(name, plural.N(len(rep.IncrementalMismatch), "key", "keys"),
			details(map[string]any{"keys": rep.IncrementalMismatch})))
	} else if rep.Mode == "full" && rep.State != StateError {
		sync(alert.KindIntegrity)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

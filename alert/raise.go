package alert

import (
	"encoding/json"
	"fmt"
)

// The alerts auditd raises, one constructor per kind of condition: each
// builds the alert's id, kind, subject, severity and summary, so that an
// id has one spelling and a severity one decision. The raiser adds its
// evidence (details, a JSON value) and fires or syncs the alert.
//
// Ids:
//
//	drift/<derivation>                        Drift
//	store_error/<derivation>                  StoreError
//	derivation_error/<derivation>             DerivationError
//	integrity/derivation/<derivation>         IncrementalMismatch
//	integrity/<log>/<violation>               LogViolation
//	integrity/checks/<checker>/<log|->/<kind> CheckFinding
//	storage/disk_full                         DiskFull

// withSeverity returns labels (copied, or made) with the severity label
// set: severity if it is not empty, else the kind's.
func withSeverity(labels map[string]string, k Kind, severity string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for n, v := range labels {
		out[n] = v
	}
	if severity == "" {
		severity = k.Severity()
	}
	out["severity"] = severity
	return out
}

// Drift is the alert of a derivation whose derived store confirmedly
// disagrees with the re-derivation on confirmed keys (missing, extra and
// mismatched of them), at the derivation spec's severity ("": the kind's,
// warning).
func Drift(derivation, severity string, keys string, missing, extra, mismatched int64, details json.RawMessage) Alert {
	return Alert{ID: "drift/" + derivation, Kind: KindDrift, Subject: derivation,
		Labels: withSeverity(map[string]string{"derivation": derivation}, KindDrift, severity),
		Summary: fmt.Sprintf("derivation %s: %s drifted from the ledger (%d missing, %d extra, %d mismatched)",
			derivation, keys, missing, extra, mismatched),
		Details: details}
}

// StoreError is the alert of a derivation whose derived store cannot be
// read (warning).
func StoreError(derivation, err string, details json.RawMessage) Alert {
	return Alert{ID: "store_error/" + derivation, Kind: KindStoreError, Subject: derivation,
		Labels:  withSeverity(map[string]string{"derivation": derivation}, KindStoreError, ""),
		Summary: fmt.Sprintf("derivation %s: the derived store cannot be checked: %s", derivation, err),
		Details: details}
}

// DerivationError is the alert of a derivation that failed to run, its
// error of the given kind (warning).
func DerivationError(derivation, kind, err string, details json.RawMessage) Alert {
	return Alert{ID: "derivation_error/" + derivation, Kind: KindDerivationError, Subject: derivation,
		Labels:  withSeverity(map[string]string{"derivation": derivation}, KindDerivationError, ""),
		Summary: fmt.Sprintf("derivation %s failed (%s): %s", derivation, kind, err),
		Details: details}
}

// IncrementalMismatch is the alert of a derivation whose incremental
// state differs from a full fold's on keys (critical).
func IncrementalMismatch(derivation, keys string, details json.RawMessage) Alert {
	return Alert{ID: "integrity/derivation/" + derivation, Kind: KindIntegrity, Subject: derivation,
		Labels:  withSeverity(map[string]string{"derivation": derivation}, KindIntegrity, ""),
		Summary: fmt.Sprintf("derivation %s: the incremental state differs from a full fold on %s", derivation, keys),
		Details: details}
}

// LogViolation is the alert of an integrity violation of a log (the
// ledger's own checks, the Kafka source's, an HTTP id conflict): one per
// log and violation, what says the detail (critical).
func LogViolation(log, violation, detail string, details json.RawMessage) Alert {
	return Alert{ID: "integrity/" + log + "/" + violation, Kind: KindIntegrity, Subject: log,
		Labels:  withSeverity(map[string]string{"log": log, "violation": violation}, KindIntegrity, ""),
		Summary: fmt.Sprintf("log %s: %s", log, detail),
		Details: details}
}

// CheckPrefix starts the ids of a self-audit checker's alerts
// (CheckFinding): a complete pass resolves those it no longer finds.
func CheckPrefix(checker string) string { return "integrity/checks/" + checker + "/" }

// CheckFinding is the alert of a self-audit checker's n findings of a kind
// in a log ("": about the store, not one log) in one pass, at severity
// ("": the kind's, critical).
func CheckFinding(checker, log, kind string, n int, severity string, details json.RawMessage) Alert {
	id, subject, shown := log, log, log
	if log == "" {
		id, subject, shown = "-", checker, "-"
	}
	return Alert{ID: CheckPrefix(checker) + id + "/" + kind, Kind: KindIntegrity, Subject: subject,
		Labels:  withSeverity(map[string]string{"checker": checker, "log": log, "violation": kind}, KindIntegrity, severity),
		Summary: fmt.Sprintf("%s found %d %s in log %s", checker, n, kind, shown),
		Details: details}
}

// DiskFullID is the id of the DiskFull alert, resolved when appends are
// accepted again.
const DiskFullID = "storage/disk_full"

// DiskFull is the alert that fires while the ledger refuses appends for
// want of space, err saying why (critical).
func DiskFull(err string) Alert {
	return Alert{ID: DiskFullID, Kind: KindStorage, Subject: "ledger",
		Labels:  withSeverity(nil, KindStorage, ""),
		Summary: "appends refused: " + err}
}

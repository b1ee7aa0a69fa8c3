package rederive

import (
	"encoding/json"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
)

// Run states.
const (
	StateClean   = "clean"   // every key matched
	StatePending = "pending" // mismatches, none confirmed yet
	StateDrift   = "drift"   // confirmed drift
	StateError   = "error"   // the run could not judge the store
	// StateNoSource: the derivation's sources match no log, so the run
	// judged nothing (Report.Waiting names the patterns).
	StateNoSource = "no_source"
)

// Error kinds of a run in state error.
const (
	ErrKindStore        = "store"        // the derived store is down or returned malformed rows
	ErrKindDerivation   = "derivation"   // derivation errors beyond the budget
	ErrKindVerification = "verification" // the ledger did not check out against its checkpoints
	ErrKindLedger       = "ledger"       // the ledger could not be read, or no log matches (WithNoMatchIsError)
	ErrKindConfig       = "config"       // the spec does not fit the store: a column of the wrong type, an unknown setting
)

// Limits of one report.
const (
	MaxReportedDrift = 1000 // drifts listed in a report (all are counted)
	MaxLineageKeys   = 100  // drifted keys whose lineage is collected
	maxTrackedDrift  = 100_000
)

// Report is the outcome of one run of a derivation.
type Report struct {
	Derivation string `json:"derivation"`
	Mode       string `json:"mode"` // "full" or "incremental"
	// FromSnapshot: the full fold started from the derivation's snapshot,
	// its sources' payloads being pruned below it.
	FromSnapshot bool   `json:"from_snapshot,omitempty"`
	State        string `json:"state"`
	ErrorKind    string `json:"error_kind,omitempty"`
	// Severity is the severity of the derivation's drift alerts, from its
	// spec (empty: warning).
	Severity string `json:"severity,omitempty"`
	// Waiting says why a pending run judged nothing (no source log has a
	// signed checkpoint yet), or names the patterns of a run in state
	// no_source.
	Waiting   string    `json:"waiting,omitempty"`
	Error     string    `json:"error,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"duration_seconds"`
	// Pins are the ledger prefixes the expected values were computed at.
	Pins []fold.Pin `json:"pins"`
	// Watermarks are the sizes the store reported having applied.
	Watermarks map[string]uint64 `json:"watermarks,omitempty"`
	// Ahead names the source logs whose store watermark is ahead of the
	// latest signed checkpoint: while any is, every drift is pending.
	Ahead     []string      `json:"watermark_ahead,omitempty"`
	Events    uint64        `json:"events_folded"`
	Keys      int           `json:"keys"`
	Stats     compare.Stats `json:"compare"`
	Confirmed int           `json:"confirmed"`
	Pending   int           `json:"pending"`
	// Drift lists up to MaxReportedDrift drifted keys, confirmed first.
	Drift []DriftReport `json:"drift"`
	// DerivationErrors counts events whose filter, key or step failed.
	DerivationErrors int               `json:"derivation_errors"`
	Errors           []fold.EventError `json:"errors,omitempty"`
	// IncrementalMismatch lists keys where a full fold disagreed with the
	// incremental state it checked (empty when they agree).
	IncrementalMismatch []string `json:"incremental_mismatch,omitempty"`
}

// DriftReport is one drifted key with the evidence behind its expected
// value.
type DriftReport struct {
	compare.Drift
	// Status is "confirmed" or "pending".
	Status string `json:"status"`
	// Runs is how many consecutive runs have seen this key drift.
	Runs int `json:"runs"`
	// Newest is the newest ledger entry that contributed to the key.
	Newest *fold.EventRef `json:"newest_event,omitempty"`
	// Lineage is the last entries that produced the expected value, oldest
	// first, each with its inclusion proof in its pinned tree.
	Lineage []Evidence `json:"lineage,omitempty"`
}

// Evidence is a ledger entry and the proof that it is in a signed tree.
type Evidence struct {
	fold.EventRef
	TreeSize uint64        `json:"tree_size"`
	Proof    []merkle.Hash `json:"inclusion_proof"`
	// Why is set on an entry named for what it explains: its contribution
	// is the difference (or its opposite), or it is the key's first entry
	// since the key last agreed with the store. The others are the key's
	// last entries.
	Why string `json:"why,omitempty"`
}

// LatestReport returns the saved report of a derivation's latest run.
func LatestReport(b *ledger.Bucket, name string) (*Report, error) {
	v, err := b.Get([]byte("report/" + name))
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(v, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}

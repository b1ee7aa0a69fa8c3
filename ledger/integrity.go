package ledger

import (
	"errors"
	"fmt"
)

// ErrIntegrity reports stored data that contradicts the log's own tree or
// signed checkpoints: an entry missing from storage, a payload or leaf that
// no longer hashes to the tree's leaf, a tile that does not rebuild, a log
// behind a checkpoint it signed. It is never the caller's fault, and retrying
// does not help; the API answers it with 500 and the code "integrity".
var ErrIntegrity = errors.New("ledger: integrity failure")

// Kinds of integrity failure (IntegrityError.Kind, the kind label of
// auditd_ledger_integrity_violations_total).
const (
	IntegrityEntryMissing   = "entry_missing"   // an entry below the tree size is not in storage
	IntegrityEntryCorrupt   = "entry_corrupt"   // a stored entry does not decode
	IntegrityLeafMismatch   = "leaf_mismatch"   // an entry's recomputed leaf hash differs from the tree's
	IntegrityTileMismatch   = "tile_mismatch"   // a stored tile hash differs from the one rebuilt from the leaves
	IntegrityTileMissing    = "tile_missing"    // a tile the tree needs is not in storage
	IntegrityRootMismatch   = "root_mismatch"   // the tree's root at a checkpoint's size differs from the checkpoint
	IntegrityCheckpointBad  = "checkpoint_bad"  // a stored checkpoint does not parse or verify
	IntegrityRollback       = "rollback"        // the log is behind, or inconsistent with, a checkpoint it signed
	IntegrityConsistencyBad = "consistency_bad" // two stored checkpoints are not consistent
	IntegrityFork           = "fork"            // two signed checkpoints of one log (ours and a peer's) cannot both be true

	IntegrityPeerCheckpointBad = "peer_checkpoint_bad" // a peer's checkpoint does not verify with its key or names another origin
	IntegrityInvariant         = "invariant"           // a derivation's state fails one of its declared invariants

	IntegritySourceRecreated = "source_recreated" // a Kafka topic a log was read from was deleted and recreated (its topic id changed)
	IntegritySourceMismatch  = "source_mismatch"  // a Kafka record re-read from the broker differs from the leaf the log holds for its offset
	IntegritySourceMissing   = "source_missing"   // an offset the log holds is absent from the partition's retained range (not compacted)
)

// IntegrityError is an ErrIntegrity with where it was found.
type IntegrityError struct {
	Log string
	// Index is the entry concerned, or -1 when the failure is not about one
	// entry (a tile, a checkpoint, the whole log).
	Index  int64
	Kind   string // one of the Integrity* kinds
	Detail string
}

func (e *IntegrityError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("ledger: integrity: %s entry %d: %s: %s", e.Log, e.Index, e.Kind, e.Detail)
	}
	return fmt.Sprintf("ledger: integrity: %s: %s: %s", e.Log, e.Kind, e.Detail)
}

// Is makes errors.Is(err, ErrIntegrity) true.
func (e *IntegrityError) Is(target error) bool { return target == ErrIntegrity }

// WithIntegrityHandler sets a function told of every integrity failure the
// store finds while serving (reads, open, signing). It is called
// synchronously from the goroutine that found the failure and must not
// block; it may be called many times for the same failure.
func WithIntegrityHandler(f func(*IntegrityError)) Option {
	return func(o *options) { o.onIntegrity = f }
}

// integrity records an integrity failure: it is logged, counted and passed
// to the handler. It returns e, so callers can write return s.integrity(...).
func (s *Store) integrity(e *IntegrityError) *IntegrityError {
	s.metrics.violations.WithLabelValues(e.Log, e.Kind).Inc()
	s.log.Error("integrity failure", "log", e.Log, "index", e.Index, "kind", e.Kind, "detail", e.Detail)
	if f := s.opts.onIntegrity; f != nil {
		f(e)
	}
	return e
}

package checkers

import (
	"fmt"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/ledger"
)

// pruneSource is a LogSource that knows the log's pruning watermark
// (ledger.Log.PrunePayloads): the entries below it hold no payload by
// policy. A source without one (a remote log) is not checked for payloads
// gone outside the policy.
type pruneSource interface {
	PruneWatermark() (uint64, error)
}

var _ pruneSource = rawLogSource{}

// PruneWatermark implements pruneSource.
func (s rawLogSource) PruneWatermark() (uint64, error) { return s.r.PruneWatermark() }

// FindingKinds are the kinds a scrub reports: the ledger's integrity kinds
// the payloads pruned outside the policy and the index chunks that
// differ from their entries.
func (s *Scrub) FindingKinds() []string {
	return append(append([]string{}, kinds...), ledger.IntegrityPrunedOutsidePolicy, ledger.IntegrityIndexMismatch)
}

// prunedCheck finds entries at or above the pruning watermark whose
// payload is gone (and that are not oversize records): deleted outside the
// retention policy. A pruned entry is otherwise checked like any other, by
// the leaf recomputed from its remaining fields and the payload hash
// stored in place of the payload. Consecutive such entries are one
// finding.
type prunedCheck struct {
	known     bool   // the source knows its watermark
	watermark uint64 // entries below it may hold no payload
	from, n   uint64 // the current run of entries pruned above it
}

func (w *logScrub) loadWatermark() error {
	ps, ok := w.src.(pruneSource)
	if !ok {
		return nil
	}
	wm, err := ps.PruneWatermark()
	if err != nil {
		return fmt.Errorf("read pruning watermark: %w", err)
	}
	w.pruned = prunedCheck{known: true, watermark: wm}
	return nil
}

// checkPruned looks at entry e in index order.
func (w *logScrub) checkPruned(e *ledger.ScannedEntry) {
	c := &w.pruned
	if !c.known {
		return
	}
	if e.Err == nil && e.Pruned && e.Index >= c.watermark {
		if c.n == 0 {
			c.from = e.Index
		}
		c.n++
		return
	}
	w.flushPruned()
}

// flushPruned reports the current run, if any.
func (w *logScrub) flushPruned() {
	c := &w.pruned
	if c.n == 0 {
		return
	}
	holds, their := "hold no payload", "their payloads were"
	if c.n == 1 {
		holds, their = "holds no payload", "its payload was"
	}
	w.found(Finding{Index: At(c.from), Kind: ledger.IntegrityPrunedOutsidePolicy, Detail: fmt.Sprintf(
		"%s from %d %s, but the log's pruning watermark is %d: %s deleted outside the retention policy (the leaves still match the tree)",
		plural.N(c.n, "entry", "entries"), c.from, holds, c.watermark, their)})
	c.n = 0
}

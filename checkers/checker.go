// Package checkers holds auditd's self-audit: periodic integrity checks
// that trust nothing the ledger stored, not even its own tiles. The ledger
// scrub re-reads every entry and rebuilds the tree; the checkpoint audit
// checks every stored signed checkpoint against the latest. A Runner runs
// checkers on a schedule, throttled so a pass never starves ingestion, keeps
// their findings, exports their metrics and raises each finding as an
// integrity alert; `auditd fsck` runs the same checkers once, offline.
package checkers

import (
	"context"
	"fmt"

	"github.com/auditd/auditd/rederive"
)

// Finding is one thing a check found wrong.
type Finding struct {
	Log string `json:"log"`
	// Index is the entry concerned, when the finding is about one entry.
	Index *uint64 `json:"index,omitempty"`
	// Tile names a stored tile ("level/n", C2SP tile coordinates) when the
	// finding is about one.
	Tile string `json:"tile,omitempty"`
	// Checkpoint is the size of the stored signed checkpoint concerned,
	// when the finding is about one.
	Checkpoint *uint64 `json:"checkpoint,omitempty"`
	// Kind is one of the ledger.Integrity* kinds.
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Evidence holds what proves the finding to a third party, such as
	// the two signed checkpoint notes of a fork, or the signed checkpoints
	// an invariant finding's lineage is proven against.
	Evidence []string `json:"evidence,omitempty"`
	// Key is the derived key concerned, when the finding is about one
	// (an invariant failing on one key's state).
	Key string `json:"key,omitempty"`
	// Lineage is, for a finding about a derived key, the last ledger
	// entries applied to it, oldest first, each with its inclusion proof
	// in the signed checkpoint (in Evidence) of its log.
	Lineage []rederive.Evidence `json:"lineage,omitempty"`
}

func (f Finding) String() string {
	switch {
	case f.Index != nil:
		return fmt.Sprintf("%s entry %d: %s: %s", f.Log, *f.Index, f.Kind, f.Detail)
	case f.Tile != "":
		return fmt.Sprintf("%s tile %s: %s: %s", f.Log, f.Tile, f.Kind, f.Detail)
	case f.Checkpoint != nil:
		return fmt.Sprintf("%s checkpoint %d: %s: %s", f.Log, *f.Checkpoint, f.Kind, f.Detail)
	}
	return fmt.Sprintf("%s: %s: %s", f.Log, f.Kind, f.Detail)
}

// At returns a pointer to index, for Finding.Index and Finding.Checkpoint.
func At(index uint64) *uint64 { return &index }

// Progress is what a pass tells as it goes. The Runner implements it with
// its throttle, metrics and stored findings; fsck with a progress bar.
type Progress interface {
	// Checked records n more entries checked. It blocks as long as the
	// throttle requires and returns ctx's error if ctx ends meanwhile.
	Checked(ctx context.Context, n int) error
	// Found records a finding. A checker keeps going after one.
	Found(f Finding)
}

// FindingKinder is implemented by a Checker that says which kinds of
// finding it can report: the Runner exports a 0-valued findings series for
// each from the start, so that an alert rule or a dashboard sees the series
// before the first finding. A Checker without it gets the ledger's kinds.
type FindingKinder interface {
	FindingKinds() []string
}

// Checker is one self-audit.
type Checker interface {
	// Name names the checker in metrics, GET /v1/checks and alerts
	// ("scrub", "checkpoints").
	Name() string
	// Run makes one full pass. Findings go to p.Found; an error means the
	// pass could not finish (storage unreadable, ctx ended), not that it
	// found something.
	Run(ctx context.Context, p Progress) error
}

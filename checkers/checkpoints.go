package checkers

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// CheckpointAudit checks every stored signed checkpoint of each log: its
// signature and origin verify with the log's key and it says the size it is
// filed under (else checkpoint_bad), and it is consistent with the latest
// valid checkpoint the stored tree covers, by a consistency proof built from
// the log's stored tree and verified (else consistency_bad). Each finding
// carries the checkpoint's size.
//
// The proofs come from the stored tiles, as the API serves them: a tile the
// scrub finds corrupt can also fail the proofs that read it.
type CheckpointAudit struct {
	src Source
	v   note.Verifier
}

var _ Checker = (*CheckpointAudit)(nil)

// NewCheckpointAudit returns the checkpoint audit of src's logs, whose
// checkpoints are signed by v's key.
func NewCheckpointAudit(src Source, v note.Verifier) *CheckpointAudit {
	return &CheckpointAudit{src: src, v: v}
}

// Name implements Checker.
func (a *CheckpointAudit) Name() string { return "checkpoints" }

// Run implements Checker.
func (a *CheckpointAudit) Run(ctx context.Context, p Progress) error {
	logs, err := a.src.Logs(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint audit: list logs: %w", err)
	}
	for _, name := range logs {
		if err := a.RunLog(ctx, name, p); err != nil {
			return err
		}
	}
	return nil
}

// RunLog audits one log's checkpoints.
func (a *CheckpointAudit) RunLog(ctx context.Context, name string, p Progress) error {
	ls, err := a.src.Log(ctx, name)
	if err != nil {
		return fmt.Errorf("checkpoint audit: %s: %w", name, err)
	}
	defer ls.Close()
	raw, err := ls.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint audit: %s: read checkpoints: %w", name, err)
	}
	found := func(size uint64, kind, detail string) {
		p.Found(Finding{Log: name, Checkpoint: At(size), Kind: kind, Detail: detail})
	}
	origin := a.v.Name() + "/" + name
	var valid []merkle.Checkpoint
	for _, c := range raw {
		cp, err := merkle.OpenCheckpoint(c.Note, a.v, origin)
		switch {
		case err != nil:
			found(c.Size, ledger.IntegrityCheckpointBad, fmt.Sprintf("stored checkpoint of size %d: %v", c.Size, err))
		case cp.Size != c.Size:
			found(c.Size, ledger.IntegrityCheckpointBad, fmt.Sprintf("stored under size %d, the signed note says size %d", c.Size, cp.Size))
		default:
			valid = append(valid, cp)
		}
	}
	// The latest valid checkpoint the stored tree covers; those beyond it
	// are the scrub's rollback findings.
	size := ls.Size()
	latest := -1
	for i, c := range valid {
		if c.Size <= size {
			latest = i
		}
	}
	if latest < 0 {
		return nil
	}
	to := valid[latest]
	for _, c := range valid[:latest] {
		if err := p.Checked(ctx, 0); err != nil {
			return err
		}
		switch {
		case c.Size == 0:
			if c.Root != merkle.EmptyRoot() {
				found(0, ledger.IntegrityConsistencyBad, fmt.Sprintf("checkpoint of the empty tree has root %s", c.Root))
			}
			continue
		case c.Size == to.Size:
			if c.Root != to.Root {
				found(c.Size, ledger.IntegrityConsistencyBad, "two signed checkpoints of one size with different roots (a fork)")
			}
			continue
		}
		proof, err := ls.ConsistencyProof(ctx, c.Size, to.Size)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			found(c.Size, ledger.IntegrityConsistencyBad, fmt.Sprintf("no consistency proof from size %d to %d: %v", c.Size, to.Size, err))
			continue
		}
		if err := merkle.VerifyConsistency(c.Size, to.Size, proof, c.Root, to.Root); err != nil {
			found(c.Size, ledger.IntegrityConsistencyBad, fmt.Sprintf(
				"checkpoint of size %d (root %s) is not proven consistent with the latest, of size %d (root %s): %v", c.Size, c.Root, to.Size, to.Root, err))
		}
	}
	return nil
}

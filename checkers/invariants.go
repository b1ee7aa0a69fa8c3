package checkers

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

// InvariantCheck is the Checker of derivations' invariants
// (rederive.Invariants; name "invariants"): it checks them over each
// derivation's latest saved result, the state the daemon's last run of it
// saved in the bucket. A derivation that has not saved a result yet is
// skipped; a result that cannot be read or exported is an error of the
// pass. Each rederive.InvariantFinding is a Finding of kind invariant
// whose Log is the derivation's name.
//
// A per-key finding names its key and, with a ledger to read, carries the
// key's lineage (rederive.AttachInvariantLineage): the last entries
// applied to it up to the result's pins, each with its inclusion proof in
// the signed checkpoint the result was pinned at. Without its lineage a
// finding still stands; the pass fails.
type InvariantCheck struct {
	bucket   *ledger.Bucket
	ledger   rederive.Ledger
	verifier note.Verifier
	targets  []rederive.InvariantTarget
}

var _ Checker = (*InvariantCheck)(nil)

// NewInvariantCheck returns the invariant check of targets, whose results
// the derivation runner saves in bucket, read from lg (the lineage of
// failing keys; nil: findings without lineage), whose signed checkpoints
// (the lineage's evidence) verify with v.
func NewInvariantCheck(bucket *ledger.Bucket, lg rederive.Ledger, v note.Verifier, targets []rederive.InvariantTarget) *InvariantCheck {
	return &InvariantCheck{bucket: bucket, ledger: lg, verifier: v, targets: targets}
}

// Name implements Checker.
func (c *InvariantCheck) Name() string { return "invariants" }

// Run implements Checker.
func (c *InvariantCheck) Run(ctx context.Context, p Progress) error {
	var errs []error
	for _, t := range c.targets {
		name := t.Derivation.Name()
		res, err := fold.LoadResult(c.bucket, t.Derivation)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("invariants: %s: %w", name, err)
		}
		fs, err := t.Invariants.CheckResult(t.Derivation, res)
		if err != nil {
			return fmt.Errorf("invariants: %s: %w", name, err)
		}
		if c.ledger != nil && t.Lineage > 0 {
			if err := rederive.AttachInvariantLineage(ctx, c.ledger, c.verifier, t.Derivation, res, t.Lineage, fs); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				errs = append(errs, fmt.Errorf("invariants: %s: lineage: %w", name, err))
			}
		}
		for _, f := range fs {
			p.Found(Finding{Log: f.Derivation, Kind: ledger.IntegrityInvariant, Key: f.Key, Detail: f.Detail,
				Evidence: f.Evidence, Lineage: f.Lineage})
		}
		if err := p.Checked(ctx, len(res.States)); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// FindingKinds are the kinds an invariant check reports.
func (c *InvariantCheck) FindingKinds() []string { return []string{ledger.IntegrityInvariant} }

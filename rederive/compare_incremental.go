package rederive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
)

// An incremental comparison (compare.incremental) judges, in a run that
// is not full, only the keys whose expected value changed since the last
// clean comparison, whose baseline the runner keeps in its bucket under
// baselineKey, behind the identity of what it was taken for.

func baselineKey(name string) []byte { return []byte("compare-baseline/" + name) }

// baselineID identifies what a baseline is valid for: the derivation's
// logic, its value expression, its store and its comparison settings.
func baselineID(sp *spec.Spec) []byte {
	c := sp.Compare
	c.Incremental = false
	b, _ := json.Marshal([]any{spec.Fingerprint(sp), sp.Value, sp.Store, c})
	h := sha256.Sum256(b)
	return h[:]
}

// compareChanged runs the incremental comparison when one can be made: ok
// is false when there is no valid baseline or the store cannot read keys
// (the caller then compares in full).
func (r *Runner) compareChanged(ctx context.Context, st store.Store, sp *spec.Spec, expected map[string]any, fn func(compare.Drift) error) (stats compare.Stats, ok bool, err error) {
	blob, err := r.bucket.Get(baselineKey(sp.Name))
	if err != nil {
		return stats, false, nil
	}
	id := baselineID(sp)
	if !bytes.HasPrefix(blob, id) {
		return stats, false, nil
	}
	var base compare.Baseline
	if err := base.UnmarshalBinary(blob[len(id):]); err != nil {
		return stats, false, nil
	}
	stats, err = compare.CompareChanged(ctx, st, expected, &base, sp.Compare, fn)
	if errors.Is(err, compare.ErrNoBaseline) {
		return stats, false, nil
	}
	return stats, true, err
}

// saveBaseline remembers expected as the values of a clean comparison.
func (r *Runner) saveBaseline(sp *spec.Spec, expected map[string]any, logger *slog.Logger) {
	blob, err := compare.NewBaseline(expected).MarshalBinary()
	if err == nil {
		err = r.bucket.Set(baselineKey(sp.Name), append(baselineID(sp), blob...))
	}
	if err != nil {
		logger.Warn("comparison baseline not saved; the next run compares every key", "derivation", sp.Name, "err", err)
	}
}

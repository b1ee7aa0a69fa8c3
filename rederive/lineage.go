package rederive

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/auditd/auditd/rederive/fold"
)

// keyLineage is the one lineage path, of a drift (Runner.attachLineage)
// and of an invariant's finding (KeyLineage): for each of keys that an
// entry was applied to, the entries s names as explaining its difference
// that are older than its last n (fold.Explain; none for an empty s), then
// its last n entries, oldest first, in a full fold of d over spans, each
// proven in the tree of its log's signed pin (proveRef). o's KeyIndex, the
// fold's record of which keys each batch steps, when the caller has one,
// lets the fold of lineage skip the batches that step none of keys.
func keyLineage(ctx context.Context, lg Ledger, d fold.Derivation, spans []fold.Span, signed map[string]fold.Pin, keys map[string]bool, n int, s fold.Suspects, o fold.Options) (map[string][]Evidence, error) {
	o.Progress = nil
	trails, err := fold.Explain(ctx, d, spans, keys, n, s, o)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Evidence, len(trails))
	for _, k := range slices.Sorted(maps.Keys(trails)) {
		ev, err := proveTrail(ctx, lg, trails[k], signed)
		if err != nil {
			return nil, err
		}
		out[k] = ev
	}
	return out, nil
}

// proveTrail proves a key's trail: its suspects not among its last
// entries (each with why it is named; a suspect named twice, with both
// reasons), then its last entries, each with its inclusion proof
// (proveRef).
func proveTrail(ctx context.Context, lg Ledger, tr fold.Trail, signed map[string]fold.Pin) ([]Evidence, error) {
	why := map[fold.EventRef]string{}
	var extra []fold.EventRef // suspects older than the last n
	for _, s := range tr.Suspects {
		if _, dup := why[s.EventRef]; dup {
			why[s.EventRef] += "; " + s.Why
			continue
		}
		why[s.EventRef] = s.Why
		if !slices.Contains(tr.Last, s.EventRef) {
			extra = append(extra, s.EventRef)
		}
	}
	var out []Evidence
	for _, ref := range slices.Concat(extra, tr.Last) {
		ev, err := proveRef(ctx, lg, ref, signed, why[ref])
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// proveRef returns ref with its inclusion proof in the tree of the signed
// pin of its log (signed, by log name). The pin is a checkpoint someone
// signed, also when the entries were read up to a pin below it (a store's
// watermark): a root computed at the watermark is signed by no one. A pin
// whose root the tree does not have fails with lg's ErrVerification; a log
// with no signed pin is an error, not a proof in an empty tree.
func proveRef(ctx context.Context, lg Ledger, ref fold.EventRef, signed map[string]fold.Pin, why string) (Evidence, error) {
	p, ok := signed[ref.Log]
	if !ok {
		return Evidence{}, fmt.Errorf("prove %s entry %d: no signed checkpoint of %s to prove it in", ref.Log, ref.Index, ref.Log)
	}
	proof, err := lg.Prove(ctx, ref.Log, ref.Index, p)
	if err != nil {
		return Evidence{}, fmt.Errorf("prove %s entry %d in the tree of size %d: %w", ref.Log, ref.Index, p.Size, err)
	}
	return Evidence{EventRef: ref, TreeSize: p.Size, Proof: proof, Why: why}, nil
}

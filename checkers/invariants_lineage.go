package checkers

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

// attachLineage adds to each per-key finding of fs (at most
// MaxInvariantFindings keys) the last t.Lineage entries applied to its key
// by a full fold of t's derivation up to res's pins, oldest first, each
// with its inclusion proof in the signed checkpoint its log's pin names,
// and those checkpoints' notes as the finding's evidence. It is a second
// pass over the source logs, made only when a key fails.
func attachLineage(ctx context.Context, lg rederive.Ledger, v note.Verifier, t InvariantTarget, res *fold.Result, fs []Finding) error {
	keys := map[string]bool{}
	for _, f := range fs {
		if f.Key != "" && len(keys) < MaxInvariantFindings {
			keys[f.Key] = true
		}
	}
	if len(keys) == 0 || len(res.Pins) == 0 {
		return nil
	}
	spans := make([]fold.Span, 0, len(res.Pins))
	signed := make(map[string]fold.Pin, len(res.Pins))
	for _, p := range res.Pins {
		sp, err := signedPin(p, v)
		if err != nil {
			return err
		}
		signed[p.Log] = sp
		spans = append(spans, fold.Span{Reader: lg.Reader(p.Log, sp), From: 0, To: p.Size, Pin: p})
	}
	lin, err := fold.Lineage(ctx, t.Derivation, spans, keys, t.Lineage, fold.Options{})
	if err != nil {
		return err
	}
	proofs := map[string][]rederive.Evidence{}
	for k := range keys {
		for _, ref := range lin[k] {
			sp := signed[ref.Log]
			proof, err := lg.Prove(ctx, ref.Log, ref.Index, sp)
			if err != nil {
				return fmt.Errorf("prove %s entry %d in the tree of size %d: %w", ref.Log, ref.Index, sp.Size, err)
			}
			proofs[k] = append(proofs[k], rederive.Evidence{EventRef: ref, TreeSize: sp.Size, Proof: proof})
		}
	}
	for i := range fs {
		f := &fs[i]
		ev, ok := proofs[f.Key]
		if f.Key == "" || !ok {
			continue
		}
		f.Lineage = ev
		seen := map[string]bool{}
		for _, e := range ev {
			if note := signed[e.Log].Checkpoint; note != "" && !seen[e.Log] {
				seen[e.Log] = true
				f.Evidence = append(f.Evidence, note)
			}
		}
	}
	return nil
}

// signedPin returns the pin of the signed checkpoint p names (its size and
// root read from the note, once its signature verifies with v), which the
// run's evidence rests on: p itself when it names none, or when it is that
// checkpoint.
func signedPin(p fold.Pin, v note.Verifier) (fold.Pin, error) {
	if p.Checkpoint == "" {
		return p, nil
	}
	if v == nil {
		return fold.Pin{}, fmt.Errorf("pin of %s: no key to verify its checkpoint with", p.Log)
	}
	n, err := note.Open([]byte(p.Checkpoint), note.VerifierList(v))
	if err != nil {
		return fold.Pin{}, fmt.Errorf("pin of %s: checkpoint: %w", p.Log, err)
	}
	c, err := merkle.ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return fold.Pin{}, fmt.Errorf("pin of %s: %w", p.Log, err)
	}
	if c.Size < p.Size {
		return fold.Pin{}, fmt.Errorf("pin of %s at size %d names a checkpoint of size %d", p.Log, p.Size, c.Size)
	}
	return fold.Pin{Log: p.Log, Size: c.Size, Root: c.Root, Checkpoint: p.Checkpoint}, nil
}

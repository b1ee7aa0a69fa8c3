package rederive

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
)

// InvariantTarget is a derivation and its invariants, as a check of them
// runs over the derivation's saved results.
type InvariantTarget struct {
	Derivation fold.Derivation
	Invariants *Invariants
	// Lineage is how many of the last entries applied to a key a per-key
	// finding carries, with their inclusion proofs (the derivation spec's
	// lineage); 0: none.
	Lineage int
}

// AttachInvariantLineage adds to each per-key finding of fs (at most
// MaxInvariantFindings keys) the last n entries applied to its key by a
// full fold of d up to res's pins (fold.Lineage, as a drift's lineage),
// oldest first, each with its inclusion proof in the signed checkpoint
// its log's pin names, and those checkpoints' notes as the finding's
// evidence. It is a second pass over the source logs, made only when a
// key fails. The checkpoints verify with v; on an error the findings are
// left without lineage.
func AttachInvariantLineage(ctx context.Context, lg Ledger, v note.Verifier, d fold.Derivation, res *fold.Result, n int, fs []InvariantFinding) error {
	keys := map[string]bool{}
	for _, f := range fs {
		if f.Key != "" && len(keys) < MaxInvariantFindings {
			keys[f.Key] = true
		}
	}
	if n <= 0 || len(keys) == 0 || len(res.Pins) == 0 {
		return nil
	}
	signed := make(map[string]fold.Pin, len(res.Pins))
	for _, p := range res.Pins {
		sp, err := signedPin(p, v)
		if err != nil {
			return err
		}
		signed[p.Log] = sp
	}
	proofs, err := KeyLineage(ctx, lg, d, res.Pins, signed, keys, n)
	if err != nil {
		return err
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

// KeyLineage returns, for each of keys that an entry was applied to, the
// last n entries applied to it by a full fold of d over its source logs
// up to pins (as fold.Lineage), oldest first, each with its inclusion
// proof in the tree of its log's signed pin (signed, by log name; a log
// absent from it is proven at its pin): keyLineage, as a drift's lineage. Reading a log under its signed pin lets a
// pin below the signed checkpoint (a derived store's watermark) still be
// proven in a tree someone signed.
func KeyLineage(ctx context.Context, lg Ledger, d fold.Derivation, pins []fold.Pin, signed map[string]fold.Pin, keys map[string]bool, n int) (map[string][]Evidence, error) {
	spans := make([]fold.Span, 0, len(pins))
	at := make(map[string]fold.Pin, len(pins))
	for _, p := range pins {
		sp, ok := signed[p.Log]
		if !ok {
			sp = p
		}
		at[p.Log] = sp
		spans = append(spans, fold.Span{Reader: lg.Reader(p.Log, sp), From: 0, To: p.Size, Pin: p})
	}
	// The check folds nothing: there is no KeyIndex of the fold that
	// saved the result, and lineage reads every batch.
	return keyLineage(ctx, lg, d, spans, at, keys, n, fold.Suspects{}, fold.Options{})
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

package rederive

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/store"
)

// forgedPinLedger is a LocalLedger whose signed pins carry a root the
// tree does not have (the size and note kept).
type forgedPinLedger struct{ LocalLedger }

func (l forgedPinLedger) Pin(ctx context.Context, log string) (fold.Pin, bool, error) {
	p, ok, err := l.LocalLedger.Pin(ctx, log)
	p.Root = merkle.Hash{1, 2, 3}
	return p, ok, err
}

// TestLineageForgedPinFailsAlike: drift lineage and invariant lineage
// prove their entries through one path: a signed pin whose root the tree
// does not have fails both the same way (a verification error, the run in
// state error of kind verification, one message), and a log without a
// signed pin is an error, not a proof in an empty tree.
func TestLineageForgedPinFailsAlike(t *testing.T) {
	t.Parallel()
	l := newRTLedger(t)
	l.append(t, "payments", rtTransfers(5, 30, 3, "acct-"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "balances.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	job := rtJob(t, rtSpec("bal", store.Config{File: &store.FileConfig{Path: path}}))

	// The honest ledger: every key is missing from the empty store, and
	// each has its lineage.
	honest := rtRun(t, l.runner(nil), job, false)
	if honest.State != StateDrift || len(honest.Drift) != 3 || len(honest.Drift[0].Lineage) == 0 {
		t.Fatalf("honest run: state %s, drift %+v", honest.State, honest.Drift)
	}

	forged := forgedPinLedger{LocalLedger{l.store}}
	rep := rtRun(t, NewRunner(forged, WithWorkers(2), WithLogger(l.runner(nil).logger)), job, false)
	if rep.State != StateError || rep.ErrorKind != ErrKindVerification {
		t.Fatalf("drift lineage at a forged pin: state %s kind %q (%s), want error of kind verification", rep.State, rep.ErrorKind, rep.Error)
	}

	keys := map[string]bool{}
	for _, dr := range honest.Drift {
		keys[dr.Key] = true
	}
	pin, _, err := forged.Pin(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	_, err = KeyLineage(ctx, forged, job.Derivation, []fold.Pin{pin}, map[string]fold.Pin{"payments": pin}, keys, job.Spec.Lineage)
	if !errors.Is(err, ErrVerification) {
		t.Fatalf("invariant lineage at a forged pin: %v, want ErrVerification", err)
	}
	if rep.Error != err.Error() || !strings.HasPrefix(err.Error(), "prove payments entry ") {
		t.Errorf("the two lineages fail differently:\ndrift:     %s\ninvariant: %s", rep.Error, err)
	}

	// No signed pin of the entries' log: refused, not proven at size 0.
	var spans []fold.Span
	for _, p := range honest.Pins {
		spans = append(spans, fold.Span{Reader: forged.Reader(p.Log, p), To: p.Size, Pin: p})
	}
	_, err = keyLineage(ctx, forged, job.Derivation, spans, map[string]fold.Pin{}, keys, 5, fold.Suspects{}, fold.Options{})
	if err == nil || !strings.Contains(err.Error(), "no signed checkpoint of payments") {
		t.Fatalf("lineage without a signed pin: %v", err)
	}
}

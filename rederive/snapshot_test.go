package rederive

import (
	"context"
	"crypto/rand"
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

func testSnapshotKey(t testing.TB, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func prune(t testing.TB, lg *rtLedger, log string, before uint64) {
	t.Helper()
	res, err := lg.log(t, log).PrunePayloads(context.Background(), ledger.PruneOptions{Before: before})
	if err != nil || res.To != before {
		t.Fatalf("prune %s below %d: %+v, %v", log, before, res, err)
	}
}

// fullFold folds job over the logs of lg from zero, at their checkpoints.
func fullFold(t testing.TB, lg *rtLedger, job Job, logs ...string) *fold.Result {
	t.Helper()
	var spans []fold.Span
	for _, name := range logs {
		cp := lg.checkpoint(t, name)
		spans = append(spans, fold.Span{Reader: fold.LocalLog(lg.log(t, name)), To: cp.Size,
			Pin: fold.Pin{Log: name, Size: cp.Size, Root: cp.Root, Checkpoint: string(cp.Note)}})
	}
	res, err := fold.Fold(context.Background(), job.Derivation, nil, spans, fold.Options{Workers: 2, Fingerprint: spec.Fingerprint(job.Spec)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sameResult(t testing.TB, d fold.Derivation, got, want *fold.Result) {
	t.Helper()
	g, err := EncodeState(d, got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := EncodeState(d, want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) || !reflect.DeepEqual(got.Pins, want.Pins) {
		t.Errorf("result: %d keys, %d events, pins %+v; want %d keys, %d events, pins %+v (states equal: %v)",
			len(got.States), got.Events, got.Pins, len(want.States), want.Events, want.Pins, string(g) == string(w))
	}
}

// A derivation continues from a snapshot past a pruned range and equals a
// full fold over an unpruned copy of the same log: fold all, snapshot at
// N, prune below N, fold again over more events, from the snapshot.
func TestSnapshotContinuesPastPrunedRange(t *testing.T) {
	t.Parallel()
	lg, copyLg := newRTLedger(t), newRTLedger(t)
	pg := newRTPG(t)
	job := rtJob(t, rtSpec("balances", pg.config()))
	fp := spec.Fingerprint(job.Spec)
	signer, verifier := testSnapshotKey(t, "snapshot-test.example")
	b := lg.bucket(t)
	r := NewRunner(LocalLedger{lg.store}, WithBucket(b), WithWorkers(2), WithSnapshotVerifier(verifier))
	evs := rtTransfers(21, 3000, 40, "acct-")
	const n = 2100 // past two read batches of 1,024
	lg.append(t, "payments", evs[:n])
	copyLg.append(t, "payments", evs[:n])
	pg.set(t, rtBalances(evs[:n], nil))
	if rep := rtRun(t, r, job, false); rep.State != StateClean {
		t.Fatalf("first run: %s (%s)", rep.State, rep.Error)
	}
	snap, err := SnapshotSaved(b, job.Derivation, fp, signer)
	if err != nil || snap == nil || snap.Size("payments") != n {
		t.Fatalf("snapshot: %+v, %v", snap, err)
	}
	// Unchanged pins: the snapshot in the bucket stays (not remade).
	if again, err := SnapshotSaved(b, job.Derivation, fp, signer); err != nil || again == nil || !again.Saved.Equal(snap.Saved) {
		t.Fatalf("snapshot again: %+v, %v; want the one saved at %v", again, err, snap.Saved)
	}
	// Another fingerprint: no snapshot to bound pruning by.
	if other, err := SnapshotSaved(b, job.Derivation, "other", signer); err != nil || other != nil {
		t.Fatalf("snapshot of another fingerprint: %+v, %v; want none", other, err)
	}
	prune(t, lg, "payments", n)

	lg.append(t, "payments", evs[n:])
	copyLg.append(t, "payments", evs[n:])
	pg.set(t, rtBalances(evs, nil))
	want := fullFold(t, copyLg, job, "payments")
	// A full run (it also checks the incremental path, on the snapshot).
	rep := rtRun(t, r, job, true)
	if rep.State != StateClean || !rep.FromSnapshot || len(rep.IncrementalMismatch) != 0 || rep.Events != uint64(len(evs)) {
		t.Fatalf("full run after pruning: state %s (%s), from snapshot %v, mismatch %v, events %d",
			rep.State, rep.Error, rep.FromSnapshot, rep.IncrementalMismatch, rep.Events)
	}
	got, err := fold.LoadResult(b, job.Derivation)
	if err != nil {
		t.Fatal(err)
	}
	want.Pins[0].Checkpoint, got.Pins[0].Checkpoint = "", "" // two ledgers, two keys
	sameResult(t, job.Derivation, got, want)

	// Without a saved result, an incremental run starts from the snapshot too.
	if err := fold.DeleteResult(b, job.Spec.Name); err != nil {
		t.Fatal(err)
	}
	if rep := rtRun(t, r, job, false); rep.State != StateClean || !rep.FromSnapshot || rep.Mode != "full" {
		t.Fatalf("run without a saved result: state %s (%s), from snapshot %v, mode %s", rep.State, rep.Error, rep.FromSnapshot, rep.Mode)
	}
}

// A run that would fold over pruned payloads without a snapshot that
// covers them fails naming the range; it never skips it.
func TestSnapshotPrunedRangeWithoutSnapshot(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	pg := newRTPG(t)
	job := rtJob(t, rtSpec("balances", pg.config()))
	signer, _ := testSnapshotKey(t, "snapshot-test.example")
	b := lg.bucket(t)
	r := lg.runner(b)
	evs := rtTransfers(22, 1500, 20, "acct-")
	lg.append(t, "payments", evs[:300])
	pg.set(t, rtBalances(evs[:300], nil))
	if rep := rtRun(t, r, job, false); rep.State != StateClean {
		t.Fatalf("first run: %s (%s)", rep.State, rep.Error)
	}
	// A snapshot at 300 does not cover a prune below 1100.
	if _, err := SnapshotSaved(b, job.Derivation, spec.Fingerprint(job.Spec), signer); err != nil {
		t.Fatal(err)
	}
	lg.append(t, "payments", evs[300:])
	prune(t, lg, "payments", 1100)
	pg.set(t, rtBalances(evs, nil))
	for _, full := range []bool{true, false} {
		if full == false {
			// The saved result at 300 is behind the pruned range as well.
			if err := fold.DeleteResult(b, job.Spec.Name); err != nil {
				t.Fatal(err)
			}
			if err := b.Delete([]byte("snapshot/balances")); err != nil {
				t.Fatal(err)
			}
		}
		rep := rtRun(t, r, job, full)
		if rep.State != StateError || !strings.Contains(rep.Error, "log payments entries [0, 1100)") ||
			!strings.Contains(rep.Error, "no snapshot covers them") {
			t.Errorf("run (full %v) over a pruned range: state %s, error %q; want an error naming log payments [0, 1100)", full, rep.State, rep.Error)
		}
	}
	// A stateless run (no bucket, no snapshot) says the same.
	rep := rtRun(t, lg.runner(nil), job, true)
	if rep.State != StateError || !strings.Contains(rep.Error, "log payments entries [0, 1100)") {
		t.Errorf("stateless run: state %s, error %q", rep.State, rep.Error)
	}
}

// A snapshot given to the runner (auditd verify) that does not check out
// is refused: a flipped state byte, another fingerprint, another signer.
func TestSnapshotTamperedRefused(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	pg := newRTPG(t)
	job := rtJob(t, rtSpec("balances", pg.config()))
	fp := spec.Fingerprint(job.Spec)
	signer, verifier := testSnapshotKey(t, "snapshot-test.example")
	other, _ := testSnapshotKey(t, "snapshot-test.example")
	b := lg.bucket(t)
	evs := rtTransfers(23, 1200, 20, "acct-")
	lg.append(t, "payments", evs[:1100])
	pg.set(t, rtBalances(evs[:1100], nil))
	if rep := rtRun(t, lg.runner(b), job, false); rep.State != StateClean {
		t.Fatalf("first run: %s (%s)", rep.State, rep.Error)
	}
	res, err := fold.LoadResult(b, job.Derivation)
	if err != nil {
		t.Fatal(err)
	}
	good, err := NewSnapshot(job.Derivation, res, signer)
	if err != nil {
		t.Fatal(err)
	}
	lg.append(t, "payments", evs[1100:])
	prune(t, lg, "payments", 1100)
	pg.set(t, rtBalances(evs, nil))
	run := func(s *Snapshot) *Report {
		return rtRun(t, NewRunner(LocalLedger{lg.store}, WithWorkers(2), WithSnapshot(s, verifier)), job, true)
	}
	if rep := run(good); rep.State != StateClean || !rep.FromSnapshot {
		t.Fatalf("good snapshot: %s (%s)", rep.State, rep.Error)
	}

	flipped := *good
	flipped.State = append([]byte(nil), good.State...)
	flipped.State[len(flipped.State)/2] ^= 1
	resigned, err := NewSnapshot(job.Derivation, &fold.Result{Derivation: res.Derivation, Fingerprint: "other", Pins: res.Pins,
		States: res.States, Newest: res.Newest, Events: res.Events, Applied: res.Applied}, signer)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := NewSnapshot(job.Derivation, res, other)
	if err != nil {
		t.Fatal(err)
	}
	relabelled := *good
	relabelled.Fingerprint = "other" // the header, not the signed note
	for _, tc := range []struct {
		name string
		s    *Snapshot
		want string
	}{
		{"state byte flipped", &flipped, "its state hashes to"},
		{"wrong fingerprint", resigned, "its fingerprint other is not the spec's"},
		{"header fingerprint changed", &relabelled, "its fingerprint other"},
		{"wrong signature", foreign, "its note is not signed by"},
	} {
		rep := run(tc.s)
		if rep.State != StateError || rep.ErrorKind != ErrKindVerification || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: state %s, kind %s, error %q; want a verification error with %q", tc.name, rep.State, rep.ErrorKind, rep.Error, tc.want)
		}
	}
	if _, err := flipped.Open(job.Derivation, fp, verifier); !errors.Is(err, ErrSnapshot) {
		t.Errorf("Open of a flipped snapshot: %v, want ErrSnapshot", err)
	}
}

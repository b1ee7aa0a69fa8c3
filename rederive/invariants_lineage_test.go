package rederive

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/store"
)

// TestAttachInvariantLineage: a per-key finding gets the last n entries
// applied to its key, in fold order (checked against the events in plain
// Go), read up to the result's pin, which lies below the signed
// checkpoint it names, and each proven in that checkpoint's tree (not in
// a tree of the pin's size that no one signed); the note is the finding's
// evidence; the all-keys finding gets nothing. A checkpoint whose root
// line is forged, or no verifier, is refused and the findings are left
// without lineage.
func TestAttachInvariantLineage(t *testing.T) {
	l := newRTLedger(t)
	evs := rtTransfers(7, 40, 3, "acct-")
	l.append(t, "payments", evs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg := LocalLedger{l.store}
	signed, ok, err := lg.Pin(ctx, "payments")
	if err != nil || !ok || signed.Checkpoint == "" || signed.Size != 40 {
		t.Fatalf("pin %+v, %v, %v", signed, ok, err)
	}
	d := rtJob(t, rtSpec("bal", store.Config{File: &store.FileConfig{Path: "x.jsonl"}})).Derivation
	// The run was pinned at 30, below the signed checkpoint of 40.
	pin := fold.Pin{Log: "payments", Size: 30, Root: l.root(t, "payments", 30), Checkpoint: signed.Checkpoint}
	res := &fold.Result{Derivation: "bal", Pins: []fold.Pin{pin}}
	findings := func() []InvariantFinding {
		return []InvariantFinding{
			{Derivation: "bal", Key: "acct-1", Detail: "per key"},
			{Derivation: "bal", Detail: "all keys"},
		}
	}
	fs := findings()
	if err := AttachInvariantLineage(ctx, lg, l.verifier, d, res, 3, fs); err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i, e := range evs[:30] {
		if e.From == "acct-1" || e.To == "acct-1" {
			want = append(want, uint64(i))
		}
	}
	want = want[len(want)-3:]
	var got []uint64
	for _, ev := range fs[0].Lineage {
		got = append(got, ev.Index)
		if ev.TreeSize != 40 {
			t.Errorf("entry %d proven in the tree of size %d, want the signed 40", ev.Index, ev.TreeSize)
		}
		if err := merkle.VerifyInclusion(ev.Index, ev.TreeSize, ev.LeafHash, ev.Proof, signed.Root); err != nil {
			t.Errorf("entry %d: %v", ev.Index, err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lineage %v, want %v", got, want)
	}
	if len(fs[0].Evidence) != 1 || fs[0].Evidence[0] != signed.Checkpoint {
		t.Fatalf("evidence %q", fs[0].Evidence)
	}
	if fs[1].Lineage != nil || fs[1].Evidence != nil {
		t.Fatalf("the all-keys finding got %+v", fs[1])
	}

	// The root line rewritten, the signature kept: refused at the note.
	lines := strings.SplitN(signed.Checkpoint, "\n", 4)
	lines[2] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	forged := pin
	forged.Checkpoint = strings.Join(lines, "\n")
	fs = findings()
	err = AttachInvariantLineage(ctx, lg, l.verifier, d, &fold.Result{Pins: []fold.Pin{forged}}, 3, fs)
	if err == nil || !strings.Contains(err.Error(), "checkpoint") || fs[0].Lineage != nil || fs[0].Evidence != nil {
		t.Fatalf("forged checkpoint: %v, %+v", err, fs[0])
	}
	fs = findings()
	if err := AttachInvariantLineage(ctx, lg, nil, d, res, 3, fs); err == nil || fs[0].Lineage != nil {
		t.Fatalf("no verifier: %v, %+v", err, fs[0])
	}
	// n 0, or no per-key finding: nothing to collect, no error.
	fs = findings()
	if err := AttachInvariantLineage(ctx, lg, nil, d, res, 0, fs); err != nil || fs[0].Lineage != nil {
		t.Fatalf("n 0: %v, %+v", err, fs[0])
	}
}

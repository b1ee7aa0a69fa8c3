package checkers_test

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestScrubPrunedLog prunes the payloads of a log past tile and batch
// boundaries: the scrub (live and offline) checks the pruned entries by
// the fields they keep and finds nothing. Then the watermark is moved back
// below pruned entries, as if their payloads had been deleted outside the
// policy: their leaves still match the tree, yet the scrub reports them,
// as one finding.
func TestScrubPrunedLog(t *testing.T) {
	t.Parallel()
	dir, k := smallStore(t)
	st := k.open(t, dir, quiet())
	l, err := st.Log("pay")
	if err != nil {
		t.Fatal(err)
	}
	// An oversize record above the watermark holds only its payload's
	// hash from the start: not a finding.
	h := merkle.Hash{1, 2, 3}
	if _, err := l.Append(context.Background(), []ledger.Entry{{ID: "big", PayloadHash: &h, Marks: merkle.MarkOversize}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(context.Background(), l.Size()); err != nil {
		t.Fatal(err)
	}
	res, err := l.PrunePayloads(context.Background(), ledger.PruneOptions{Before: 2000, BatchSize: 512})
	if err != nil || res.Pruned != 2000 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	if c := checkAll(t, checkers.StoreSource(st), k.verifier); len(c.findings) > 0 {
		t.Fatalf("live scrub of a pruned log: %v", c.findings)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if c := checkRaw(t, dir, k.verifier); len(c.findings) > 0 {
		t.Fatalf("offline scrub of a pruned log: %v", c.findings)
	}
	editPebble(t, dir, func(db *pebble.DB, id uint32) {
		key := binary.BigEndian.AppendUint32([]byte{'p'}, id)
		if err := db.Set(key, binary.BigEndian.AppendUint64(nil, 1000), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	c := checkRaw(t, dir, k.verifier)
	if d, want := describe(c.findings), []string{"pay pruned_outside_policy index=1000"}; !slices.Equal(d, want) {
		t.Fatalf("findings %q, want %q\n%v", d, want, c.findings)
	}
	if got := c.findings[0].Detail; got == "" || !strings.Contains(got, "1000 entries from 1000") {
		t.Errorf("detail %q does not say which entries", got)
	}
}

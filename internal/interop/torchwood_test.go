package interop_test

import (
	"bytes"
	"context"
	"testing"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
)

// TestTorchwoodEntries: torchwood's client, given the tree of auditd's
// checkpoint (its signature checked by sumdb/note, its body parsed by
// torchwood), reads every entry of the log from the entry bundles,
// authenticating each against the hash tiles; the last, partial bundle is
// read by resuming at its start, as torchwood documents.
func TestTorchwoodEntries(t *testing.T) {
	t.Parallel()
	n := shortSize()
	s := serveLog(t, n)
	ctx := context.Background()
	signed, err := note.Open(s.note, note.VerifierList(s.verifier))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := torchwood.ParseCheckpoint(signed.Text)
	if err != nil || cp.Origin != s.origin || cp.N != int64(n) {
		t.Fatalf("torchwood ParseCheckpoint: %+v %v", cp, err)
	}
	f, err := torchwood.NewTileFetcher(s.prefix)
	if err != nil {
		t.Fatal(err)
	}
	c, err := torchwood.NewClient(f)
	if err != nil {
		t.Fatal(err)
	}
	lbs, _ := s.leaves(t)
	next := int64(0)
	for calls := 0; next < cp.N && calls < 3; calls++ {
		for i, e := range c.Entries(ctx, cp.Tree, next) {
			if i != next || !bytes.Equal(e, lbs[i]) {
				t.Fatalf("torchwood entry %d (expected %d) is not the leaf the ledger holds", i, next)
			}
			next++
		}
		if err := c.Err(); err != nil {
			t.Fatalf("torchwood Entries from %d: %v", next, err)
		}
	}
	if next != cp.N {
		t.Fatalf("torchwood read %d entries of %d", next, cp.N)
	}
}

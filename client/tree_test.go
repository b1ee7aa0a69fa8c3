package client_test

import (
	"errors"
	"testing"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// treeTestSize is two full bundles of 256 and a partial one of 88.
const treeTestSize = 600

// leafHashes returns the leaf hashes of l's entries [0, n).
func leafHashes(t *testing.T, l *ledger.Log, n uint64) []merkle.Hash {
	t.Helper()
	var hs []merkle.Hash
	for i := range n {
		rec, err := l.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, rec.LeafHash)
	}
	return hs
}

func TestTree(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	l := s.fill(t, "orders", treeTestSize)
	c := s.client()
	cp, _, err := c.Checkpoint(ctx(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Tree(ctx(t), "orders", cp)
	if err != nil {
		t.Fatal(err)
	}
	leaves := leafHashes(t, l, treeTestSize)
	// Every run of the real leaves checks out, whole bundles or parts,
	// across the bundle edges and into the partial last bundle.
	for _, rg := range [][2]uint64{{0, 600}, {0, 256}, {256, 512}, {255, 257}, {0, 1}, {599, 600}, {512, 600}, {300, 550}, {7, 7}} {
		if err := tree.Check(ctx(t), rg[0], leaves[rg[0]:rg[1]]); err != nil {
			t.Errorf("Check(%d, %d) of the real leaves: %v", rg[0], rg[1], err)
		}
	}
	// One wrong hash anywhere fails the run that holds it.
	for _, i := range []uint64{0, 255, 256, 511, 512, 599} {
		for _, rg := range [][2]uint64{{0, 600}, {i, i + 1}, {i - i%256, min(i-i%256+256, 600)}} {
			bad := append([]merkle.Hash(nil), leaves[rg[0]:rg[1]]...)
			bad[i-rg[0]][3] ^= 1
			if err := tree.Check(ctx(t), rg[0], bad); !errors.Is(err, client.ErrVerification) {
				t.Errorf("Check(%d, %d) with leaf %d wrong: %v, want ErrVerification", rg[0], rg[1], i, err)
			}
		}
	}
	// Leaves in the wrong place: two swapped across a bundle edge.
	sw := append([]merkle.Hash(nil), leaves[250:260]...)
	sw[5], sw[6] = sw[6], sw[5]
	if err := tree.Check(ctx(t), 250, sw); !errors.Is(err, client.ErrVerification) {
		t.Errorf("Check with leaves 255 and 256 swapped: %v, want ErrVerification", err)
	}
	if err := tree.Check(ctx(t), 590, leaves[:11]); err == nil {
		t.Error("Check beyond the tree: no error")
	}
}

func TestTreeLyingTiles(t *testing.T) {
	t.Parallel()
	flipLast := func(b []byte) []byte { b[len(b)-1] ^= 1; return b }
	for _, c := range []struct {
		name, path string
		change     func([]byte) []byte
		// atOpen: Tree itself fails; else Check of [300, 301) does, and
		// Check of the whole bundle [256, 512) does not need the tile.
		atOpen bool
	}{
		{"level-1 tile flipped", "/tile/1/000.p/2", flipLast, true},
		{"level-1 tile short", "/tile/1/000.p/2", func(b []byte) []byte { return b[:32] }, true},
		{"partial level-0 tile flipped", "/tile/0/002.p/88", flipLast, true},
		{"full level-0 tile flipped", "/tile/0/001", flipLast, false},
		{"full level-0 tile short", "/tile/0/001", func(b []byte) []byte { return b[:100] }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, rewrite(c.path, c.change))
			l := s.fill(t, "orders", treeTestSize)
			cl := s.client()
			cp, _, err := cl.Checkpoint(ctx(t), "orders")
			if err != nil {
				t.Fatal(err)
			}
			tree, err := cl.Tree(ctx(t), "orders", cp)
			if c.atOpen {
				if !errors.Is(err, client.ErrVerification) {
					t.Errorf("Tree over a %s: %v, want ErrVerification", c.name, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			leaves := leafHashes(t, l, treeTestSize)
			if err := tree.Check(ctx(t), 300, leaves[300:301]); !errors.Is(err, client.ErrVerification) {
				t.Errorf("Check(300, 301) over a %s: %v, want ErrVerification", c.name, err)
			}
			if err := tree.Check(ctx(t), 256, leaves[256:512]); err != nil {
				t.Errorf("Check(256, 512), a whole bundle, over a %s: %v", c.name, err)
			}
		})
	}
}

package merkle_test

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/merkle"
)

// rangeTreeLeaves is the size of the tlog tree the range tests share: past
// a tile (256) and a read batch (1,024) twice.
const rangeTreeLeaves = 2100

var (
	rangeTreeOnce sync.Once
	rangeTree     *tlogTree
)

func sharedRangeTree(t testing.TB) *tlogTree {
	rangeTreeOnce.Do(func() { rangeTree = newTlogTree(t, rangeTreeLeaves) })
	return rangeTree
}

func (tr *tlogTree) leafHashes(from, to uint64) []merkle.Hash {
	out := make([]merkle.Hash, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, merkle.Hash(tlog.RecordHash(tr.leaves[i])))
	}
	return out
}

// checkRootFromInclusion checks RootFromInclusion and InclusionLeft for the
// leaves [from, to) against tlog: the root, the left siblings (tlog's
// stored hashes of the perfect subtrees of [0, from)), and that a lie in
// any left sibling or any leaf changes the root while the right siblings
// are not read.
func checkRootFromInclusion(t testing.TB, tr *tlogTree, from, to uint64) {
	t.Helper()
	want := tr.root(t, int64(to))
	var path []merkle.Hash
	if from < to {
		p, err := tlog.ProveRecord(int64(to), int64(from), tr)
		if err != nil {
			t.Fatalf("tlog.ProveRecord(%d, %d): %v", to, from, err)
		}
		path = make([]merkle.Hash, len(p))
		for i := range p {
			path[i] = merkle.Hash(p[i])
		}
	}
	leaves := tr.leafHashes(from, to)
	got, err := merkle.RootFromInclusion(from, path, leaves)
	if err != nil {
		t.Fatalf("RootFromInclusion(%d, [%d leaves]): %v", from, to-from, err)
	}
	if got != merkle.Hash(want) {
		t.Fatalf("RootFromInclusion(%d, [%d leaves]) = %s, tlog.TreeHash(%d) %s", from, to-from, got, to, want)
	}
	left, err := merkle.InclusionLeft(from, to, path)
	if err != nil {
		t.Fatalf("InclusionLeft(%d, %d): %v", from, to, err)
	}
	// The perfect subtrees of [0, from), leftmost first: one per set bit
	// of from, from the highest.
	var wantLeft []merkle.Hash
	for level := 63; level >= 0; level-- {
		if from>>level&1 == 1 {
			x := tlog.StoredHashIndex(level, int64(from>>level-1))
			hs, err := tr.ReadHashes([]int64{x})
			if err != nil {
				t.Fatal(err)
			}
			wantLeft = append(wantLeft, merkle.Hash(hs[0]))
		}
	}
	if len(left) != len(wantLeft) || len(left) != bits.OnesCount64(from) {
		t.Fatalf("InclusionLeft(%d, %d) has %d hashes, want %d", from, to, len(left), len(wantLeft))
	}
	for i := range left {
		if left[i] != wantLeft[i] {
			t.Fatalf("InclusionLeft(%d, %d)[%d] = %s, tlog's subtree %s", from, to, i, left[i], wantLeft[i])
		}
	}
	// Every hash of the path: a lie in a left sibling changes the root, a
	// right sibling is not read.
	isLeft := map[merkle.Hash]bool{}
	for _, h := range left {
		isLeft[h] = true
	}
	for i := range path {
		bad := append([]merkle.Hash(nil), path...)
		bad[i][7] ^= 0x10
		r, err := merkle.RootFromInclusion(from, bad, leaves)
		if err != nil {
			t.Fatalf("RootFromInclusion with hash %d of the path changed: %v", i, err)
		}
		if isLeft[path[i]] && from > 0 && r == got {
			t.Fatalf("RootFromInclusion(%d, to %d): a lie in left sibling %d left the root unchanged", from, to, i)
		}
		if !isLeft[path[i]] && r != got {
			t.Fatalf("RootFromInclusion(%d, to %d): right sibling %d was read", from, to, i)
		}
	}
	// A lie in any leaf changes the root; test the first, the last and one
	// in the middle.
	for _, i := range []uint64{0, (to - from) / 2, to - from - 1} {
		bad := append([]merkle.Hash(nil), leaves...)
		bad[i][0] ^= 1
		if r, err := merkle.RootFromInclusion(from, path, bad); err != nil || r == got {
			t.Fatalf("RootFromInclusion(%d, to %d): leaf %d changed, root %s (%v)", from, to, from+i, r, err)
		}
	}
}

func TestRootFromInclusionSmall(t *testing.T) {
	t.Parallel()
	tr := newTlogTree(t, maxProofLeaves)
	for to := uint64(1); to <= maxProofLeaves; to++ {
		for from := uint64(0); from < to; from++ {
			checkRootFromInclusion(t, tr, from, to)
		}
	}
}

func TestRootFromInclusionBoundaries(t *testing.T) {
	t.Parallel()
	tr := sharedRangeTree(t)
	edges := []uint64{0, 1, 2, 255, 256, 257, 511, 512, 1000, 1023, 1024, 1025, 1500, 2047, 2048, 2049, rangeTreeLeaves - 1, rangeTreeLeaves}
	for _, from := range edges {
		for _, to := range edges {
			if from < to {
				checkRootFromInclusion(t, tr, from, to)
			}
		}
	}
	// The read batches of the fold engine over the whole tree.
	for from := uint64(0); from < rangeTreeLeaves; from += 1024 {
		checkRootFromInclusion(t, tr, from, min(from+1024, rangeTreeLeaves))
	}
}

func FuzzRootFromInclusion(f *testing.F) {
	for _, c := range [][2]uint16{{0, 1}, {0, 2100}, {1024, 2048}, {1500, 2100}, {255, 257}, {2099, 2100}, {7, 8}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, a, b uint16) {
		from, to := uint64(a)%rangeTreeLeaves, uint64(b)%(rangeTreeLeaves+1)
		if from >= to {
			return
		}
		checkRootFromInclusion(t, sharedRangeTree(t), from, to)
	})
}

func TestRootFromInclusionRejects(t *testing.T) {
	t.Parallel()
	tr := newTlogTree(t, maxProofLeaves)
	p, err := tlog.ProveRecord(40, 13, tr)
	if err != nil {
		t.Fatal(err)
	}
	path := make([]merkle.Hash, len(p))
	for i := range p {
		path[i] = merkle.Hash(p[i])
	}
	leaves := tr.leafHashes(13, 40)
	if _, err := merkle.RootFromInclusion(13, path[:len(path)-1], leaves); err == nil {
		t.Error("RootFromInclusion accepted a path one hash short")
	}
	if _, err := merkle.RootFromInclusion(13, append(path, path[0]), leaves); err == nil {
		t.Error("RootFromInclusion accepted a path one hash long")
	}
	if _, err := merkle.RootFromInclusion(13, nil, leaves); err == nil {
		t.Error("RootFromInclusion accepted no path for a range not starting at 0")
	}
	if _, err := merkle.RootFromInclusion(3, nil, nil); !errors.Is(err, merkle.ErrRange) {
		t.Errorf("RootFromInclusion with no leaves = %v, want ErrRange", err)
	}
	if _, err := merkle.RootFromInclusion(^uint64(0), nil, leaves[:1]); !errors.Is(err, merkle.ErrRange) {
		t.Errorf("RootFromInclusion past the largest index = %v, want ErrRange", err)
	}
	if _, err := merkle.InclusionLeft(5, 5, nil); !errors.Is(err, merkle.ErrRange) {
		t.Errorf("InclusionLeft(5, 5) = %v, want ErrRange", err)
	}
	// From 0 the path is not read.
	got, err := merkle.RootFromInclusion(0, []merkle.Hash{{1}, {2}}, tr.leafHashes(0, 40))
	if err != nil || got != merkle.Hash(tr.root(t, 40)) {
		t.Errorf("RootFromInclusion(0, ...) = %s, %v; want the root of 40", got, err)
	}
}

// A client holding leaves [3, 5) of a tree of 5 proves them against the
// tree's root with the inclusion proof of leaf 3: its left siblings cover
// [0, 3).
func ExampleRootFromInclusion() {
	var leaves []merkle.Hash
	for i := range 5 {
		leaves = append(leaves, merkle.LeafHash(fmt.Appendf(nil, "entry %d", i)))
	}
	// The server's side: subtree hashes from the leaves it stores.
	var subtree func(lo, hi uint64) merkle.Hash
	subtree = func(lo, hi uint64) merkle.Hash {
		if hi-lo == 1 {
			return leaves[lo]
		}
		mid := lo + (hi-lo)/2
		return merkle.NodeHash(subtree(lo, mid), subtree(mid, hi))
	}
	server := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		out := make([]merkle.Hash, len(ids))
		for i, id := range ids {
			out[i] = subtree(id.Index<<id.Level, (id.Index+1)<<id.Level)
		}
		return out, nil
	})
	root, _ := merkle.RootHash(5, server)
	path, _ := merkle.ProveInclusion(3, 5, server)

	// The client's side: the leaves it read and the path.
	got, err := merkle.RootFromInclusion(3, path, leaves[3:5])
	fmt.Println(got == root, err)
	// Output: true <nil>
}

package merkle_test

import (
	"testing"

	"github.com/auditd/auditd/merkle"
)

// TestRangeAppendSubtree: a perfect subtree appended by its root gives the
// same tree as its leaves appended one by one, the visitor is told of the
// subtree's root and the nodes above it, and a misaligned subtree is
// refused.
func TestRangeAppendSubtree(t *testing.T) {
	t.Parallel()
	leaves := make([]merkle.Hash, 700)
	for i := range leaves {
		leaves[i] = merkle.LeafHash([]byte{byte(i), byte(i >> 8)})
	}
	byLeaf := merkle.NewRange()
	for _, h := range leaves {
		if err := byLeaf.Append(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	rootOf := func(hs []merkle.Hash) merkle.Hash {
		r := merkle.NewRange()
		for _, h := range hs {
			if err := r.Append(h, nil); err != nil {
				t.Fatal(err)
			}
		}
		root, err := r.Root()
		if err != nil {
			t.Fatal(err)
		}
		return root
	}
	bySubtree := merkle.NewRange()
	var visited []merkle.NodeID
	visit := func(id merkle.NodeID, h merkle.Hash) { visited = append(visited, id) }
	for n := 0; n < 2; n++ {
		if err := bySubtree.AppendSubtree(8, rootOf(leaves[n*256:(n+1)*256]), visit); err != nil {
			t.Fatal(err)
		}
	}
	want := []merkle.NodeID{{Level: 8, Index: 0}, {Level: 8, Index: 1}, {Level: 9, Index: 0}}
	if len(visited) != len(want) || visited[0] != want[0] || visited[1] != want[1] || visited[2] != want[2] {
		t.Errorf("visited %v, want %v", visited, want)
	}
	for _, h := range leaves[512:] {
		if err := bySubtree.AppendSubtree(0, h, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !bySubtree.Equal(byLeaf) || bySubtree.End() != 700 {
		t.Fatalf("range by subtrees (end %d) differs from the range by leaves", bySubtree.End())
	}
	a, _ := bySubtree.Root()
	b, _ := byLeaf.Root()
	if a != b {
		t.Errorf("roots %s and %s differ", a, b)
	}
	if err := bySubtree.AppendSubtree(8, leaves[0], nil); err == nil {
		t.Error("a level-8 subtree at index 700 was accepted")
	}
	if root, err := merkle.NewRange().Root(); err != nil || root != merkle.EmptyRoot() {
		t.Errorf("empty range root = %s, %v; want the empty root", root, err)
	}
}

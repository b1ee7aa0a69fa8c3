package merkle

import (
	"crypto/sha256"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
)

// NodeID names a perfect subtree of the log: the node at Level (0 for leaves)
// and horizontal Index covers leaves [Index<<Level, (Index+1)<<Level).
type NodeID struct {
	Level uint
	Index uint64
}

// Visitor is told of every tree node a Range computes as it grows: id and
// its hash. It may be nil.
type Visitor func(id NodeID, h Hash)

// Range is a compact range over leaves [0, End()): the roots of the perfect
// subtrees that make up the tree of size End(). It grows by appending leaves
// (or whole perfect subtrees) on the right and yields the tree's root. The
// zero value is not usable: start from NewRange or RangeAt.
type Range struct {
	r *compact.Range
}

// rangeFactory hashes interior nodes with RFC 6962, one allocation per node.
var rangeFactory = &compact.RangeFactory{Hash: func(left, right []byte) []byte {
	var b [1 + 2*HashSize]byte
	b[0] = 1
	copy(b[1:], left)
	copy(b[1+HashSize:], right)
	h := sha256.Sum256(b[:])
	return h[:]
}}

// NewRange returns an empty range that accumulates a tree from leaf 0,
// hashing with RFC 6962.
func NewRange() *Range { return &Range{r: rangeFactory.NewEmptyRange(0)} }

// RangeAt returns the range of the tree of the given size, reading the hashes
// of its perfect subtrees from r.
func RangeAt(size uint64, r HashReader) (*Range, error) {
	if size == 0 {
		return NewRange(), nil
	}
	cids := compact.RangeNodes(0, size, nil)
	ids := make([]NodeID, len(cids))
	for i, id := range cids {
		ids[i] = NodeID(id)
	}
	hs, err := r.ReadHashes(ids)
	if err != nil {
		return nil, err
	}
	rng, err := rangeFactory.NewRange(0, size, toSlices(hs))
	if err != nil {
		return nil, fmt.Errorf("merkle: range of size %d: %w", size, err)
	}
	return &Range{r: rng}, nil
}

// End returns the size of the tree the range covers.
func (r *Range) End() uint64 { return r.r.End() }

// Append adds the leaf with hash h at index End(), telling visit of the leaf
// and of every interior node it completes.
func (r *Range) Append(h Hash, visit Visitor) error {
	return r.r.Append(h[:], adapt(visit))
}

// AppendSubtree adds a perfect subtree of 2^level leaves, starting at index
// End() (which must be a multiple of 2^level), given its root hash. visit is
// told of the subtree's root and of every node above it the append
// completes, not of the nodes inside the subtree.
func (r *Range) AppendSubtree(level uint, root Hash, visit Visitor) error {
	begin := r.r.End()
	width := uint64(1) << level
	if begin%width != 0 {
		return fmt.Errorf("merkle: subtree of level %d cannot start at %d", level, begin)
	}
	if visit != nil {
		visit(NodeID{Level: level, Index: begin >> level}, root)
	}
	other, err := rangeFactory.NewRange(begin, begin+width, [][]byte{root[:]})
	if err != nil {
		return fmt.Errorf("merkle: subtree at %d: %w", begin, err)
	}
	return r.r.AppendRange(other, adapt(visit))
}

// Root returns the root hash of the tree of size End(): EmptyRoot for an
// empty range.
func (r *Range) Root() (Hash, error) {
	if r.r.End() == 0 {
		return EmptyRoot(), nil
	}
	b, err := r.r.GetRootHash(nil)
	if err != nil {
		return Hash{}, fmt.Errorf("merkle: root of range of size %d: %w", r.r.End(), err)
	}
	return toHash(b), nil
}

// Equal reports whether r and o cover the same leaves with the same hashes.
func (r *Range) Equal(o *Range) bool { return r.r.Equal(o.r) }

func adapt(visit Visitor) compact.VisitFn {
	if visit == nil {
		return nil
	}
	return func(id compact.NodeID, h []byte) { visit(NodeID(id), toHash(h)) }
}

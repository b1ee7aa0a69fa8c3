package merkle

import (
	"fmt"
	"math/bits"
)

// InclusionLeft returns the left siblings on path, the inclusion proof of
// leaf index in the tree of the given size: the hashes of the perfect
// subtrees that cover the leaves [0, index), largest (leftmost) first, the
// order of compact.RangeNodes(0, index). It checks only the proof's length
// for (index, size); the hashes are whatever the proof says.
func InclusionLeft(index, size uint64, path []Hash) ([]Hash, error) {
	if index >= size {
		return nil, fmt.Errorf("%w: index %d is not below tree size %d", ErrRange, index, size)
	}
	// The walk of RFC 9162, section 2.1.3.2: a node is hashed on the left
	// of the running hash where the path meets a right child, or the last
	// node of a level (then the levels above are skipped until it is a
	// right child).
	left := make([]Hash, 0, bits.OnesCount64(index))
	fn, sn := index, size-1
	for _, p := range path {
		if sn == 0 {
			return nil, fmt.Errorf("merkle: inclusion proof of %d in %d has %d hashes, too many", index, size, len(path))
		}
		if fn&1 == 1 || fn == sn {
			left = append(left, p)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return nil, fmt.Errorf("merkle: inclusion proof of %d in %d has %d hashes, too few", index, size, len(path))
	}
	for i, j := 0, len(left)-1; i < j; i, j = i+1, j-1 {
		left[i], left[j] = left[j], left[i]
	}
	return left, nil
}

// RootFromInclusion returns the root of the tree of size from+len(leaves),
// computed from the leaf hashes of [from, from+len(leaves)) and the left
// siblings of path, the inclusion proof of leaf from in that tree. Those
// siblings are the perfect subtrees covering [0, from), so they and the
// leaves determine the root: a caller who checks the result against a
// trusted root (or proves it consistent with one) has proven every leaf
// given, at its index. Hashes of path that are not left siblings (they
// cover leaves given here) are not read. For from == 0 path is not read
// and may be nil.
func RootFromInclusion(from uint64, path []Hash, leaves []Hash) (Hash, error) {
	n := uint64(len(leaves))
	if n == 0 {
		return Hash{}, fmt.Errorf("%w: no leaves at %d", ErrRange, from)
	}
	to := from + n
	if to < from {
		return Hash{}, fmt.Errorf("%w: leaves [%d, %d+%d) overflow", ErrRange, from, from, n)
	}
	var left []Hash
	if from > 0 {
		var err error
		if left, err = InclusionLeft(from, to, path); err != nil {
			return Hash{}, err
		}
	}
	rng, err := rangeFactory.NewRange(0, from, toSlices(left))
	if err != nil {
		return Hash{}, fmt.Errorf("merkle: range [0, %d): %w", from, err)
	}
	for i := range leaves {
		if err := rng.Append(leaves[i][:], nil); err != nil {
			return Hash{}, err
		}
	}
	root, err := rng.GetRootHash(nil)
	if err != nil {
		return Hash{}, err
	}
	return toHash(root), nil
}

package merkle

import (
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle/proof"
)

// HashReader reads the hashes of perfect subtrees of a log.
//
// ReadHashes returns one hash per id, in order. Every id it is asked for covers
// leaves below a tree size the caller knows to exist; an implementation that
// cannot find one must return an error rather than a zero hash.
type HashReader interface {
	ReadHashes(ids []NodeID) ([]Hash, error)
}

// HashReaderFunc adapts a function to the HashReader interface.
type HashReaderFunc func(ids []NodeID) ([]Hash, error)

// ReadHashes calls f(ids).
func (f HashReaderFunc) ReadHashes(ids []NodeID) ([]Hash, error) { return f(ids) }

// ErrRange reports a proof request outside the tree: an index at or beyond the
// size, or a consistency proof from a larger tree to a smaller one.
var ErrRange = errors.New("merkle: out of range")

// ProveInclusion returns the RFC 6962 inclusion proof (audit path) of leaf
// index in the tree of the given size.
func ProveInclusion(index, size uint64, r HashReader) ([]Hash, error) {
	if index >= size {
		return nil, fmt.Errorf("%w: index %d is not below tree size %d", ErrRange, index, size)
	}
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, fmt.Errorf("merkle: inclusion proof %d in %d: %w", index, size, err)
	}
	return rehash(nodes, r)
}

// ProveConsistency returns the RFC 6962 consistency proof between the trees of
// sizes from and to.
func ProveConsistency(from, to uint64, r HashReader) ([]Hash, error) {
	if from > to {
		return nil, fmt.Errorf("%w: consistency from size %d to smaller size %d", ErrRange, from, to)
	}
	nodes, err := proof.Consistency(from, to)
	if err != nil {
		return nil, fmt.Errorf("merkle: consistency proof %d to %d: %w", from, to, err)
	}
	return rehash(nodes, r)
}

func rehash(nodes proof.Nodes, r HashReader) ([]Hash, error) {
	if len(nodes.IDs) == 0 {
		return []Hash{}, nil
	}
	ids := make([]NodeID, len(nodes.IDs))
	for i, id := range nodes.IDs {
		ids[i] = NodeID(id)
	}
	hs, err := r.ReadHashes(ids)
	if err != nil {
		return nil, err
	}
	if len(hs) != len(nodes.IDs) {
		return nil, fmt.Errorf("merkle: hash reader returned %d hashes for %d nodes", len(hs), len(nodes.IDs))
	}
	out, err := nodes.Rehash(toSlices(hs), hasher.HashChildren)
	if err != nil {
		return nil, err
	}
	res := make([]Hash, len(out))
	for i, b := range out {
		res[i] = toHash(b)
	}
	return res, nil
}

// RootHash returns the root hash of the tree of the given size, reading the
// perfect subtrees that make it up.
func RootHash(size uint64, r HashReader) (Hash, error) {
	if size == 0 {
		return EmptyRoot(), nil
	}
	rng, err := RangeAt(size, r)
	if err != nil {
		return Hash{}, err
	}
	return rng.Root()
}

// VerifyInclusion checks that leafHash is at index in the tree of the given
// size and root.
func VerifyInclusion(index, size uint64, leafHash Hash, path []Hash, root Hash) error {
	if err := proof.VerifyInclusion(hasher, index, size, leafHash[:], toSlices(path), root[:]); err != nil {
		return fmt.Errorf("merkle: inclusion of %d in %d: %w", index, size, err)
	}
	return nil
}

// VerifyConsistency checks that the tree of size to and root toRoot extends
// the tree of size from and root fromRoot.
func VerifyConsistency(from, to uint64, path []Hash, fromRoot, toRoot Hash) error {
	if err := proof.VerifyConsistency(hasher, from, to, toSlices(path), fromRoot[:], toRoot[:]); err != nil {
		return fmt.Errorf("merkle: consistency %d to %d: %w", from, to, err)
	}
	return nil
}

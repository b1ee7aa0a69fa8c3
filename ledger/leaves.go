package ledger

import (
	"context"
	"fmt"

	"github.com/auditd/auditd/merkle"
)

// Leaves calls fn with each entry [from, to) in index order, as entry and
// payload bundles carry it: the leaf's encoding, recomputed from the
// stored entry and checked against the tree's level-0 tile as Entries
// checks it, its leaf hash, and the payload, nil with pruned true where the ledger no
// longer holds it (pruned after retention, or an oversize payload ledgered
// by its hash alone). It reads each entry once and copies neither: leaf
// and payload are valid only during the call. to must not exceed the
// committed size; a missing, undecodable or altered entry stops the scan
// with an *IntegrityError, an error from fn stops it with that error.
func (l *Log) Leaves(ctx context.Context, from, to uint64, fn func(index uint64, leaf []byte, hash merkle.Hash, payload []byte, pruned bool) error) error {
	var (
		sc   scratch
		leaf []byte
		h    merkle.Hash
	)
	return l.scanStored(ctx, from, to, func(idx uint64, v []byte) (err error) {
		if leaf, h, err = sc.leaf(l.name, v); err != nil {
			return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(idx), Kind: IntegrityEntryCorrupt,
				Detail: fmt.Sprintf("stored entry of %d bytes: %v", len(v), err)})
		}
		return nil
	}, func(idx uint64, tree merkle.Hash) error {
		if h != tree {
			return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(idx), Kind: IntegrityLeafMismatch,
				Detail: fmt.Sprintf("the stored entry hashes to leaf %s, the tree holds %s", h, tree)})
		}
		pruned := sc.entry.flags&sPruned != 0
		payload := sc.entry.payload
		if pruned {
			payload = nil
		}
		return fn(idx, leaf, h, payload, pruned)
	})
}

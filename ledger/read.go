package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// Entry returns the entry at index. Its leaf hash, recomputed from the
// stored entry, is checked against the tree's: an entry that is missing,
// does not decode or no longer hashes to its leaf is an *IntegrityError.
func (l *Log) Entry(index uint64) (*Record, error) {
	if size := l.Size(); index >= size {
		return nil, fmt.Errorf("%w: index %d, tree size %d", ErrRange, index, size)
	}
	return l.readEntry(index)
}

// readEntry reads, decodes and checks entry index, which must be below the
// committed size: one read of the entry and one of its level-0 tile.
func (l *Log) readEntry(index uint64) (*Record, error) {
	v, closer, err := l.s.db.Get(entryKey(l.id, index))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, l.missingEntry(index)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read %s/%d: %w", l.name, index, err)
	}
	rec, err := l.decodeEntry(index, v, true, nil)
	closer.Close()
	if err != nil {
		return nil, err
	}
	h, err := l.treeLeaf(index)
	if err != nil {
		return nil, err
	}
	if err := l.checkLeaf(rec, h); err != nil {
		return nil, err
	}
	return rec, nil
}

// missingEntry reports entry index, below the tree size, absent from
// storage.
func (l *Log) missingEntry(index uint64) error {
	return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(index), Kind: IntegrityEntryMissing,
		Detail: "the entry is below the tree size but not in storage"})
}

// decodeEntry decodes the stored entry index; one that does not decode is an
// integrity failure.
func (l *Log) decodeEntry(index uint64, v []byte, leaf bool, a *recordSlab) (*Record, error) {
	rec, err := decodeStoredAs(l.name, index, v, leaf, a)
	if err != nil {
		return nil, l.s.integrity(&IntegrityError{Log: l.name, Index: int64(index), Kind: IntegrityEntryCorrupt,
			Detail: fmt.Sprintf("stored entry of %d bytes: %v", len(v), err)})
	}
	return rec, nil
}

// checkLeaf compares a record's recomputed leaf hash with the tree's hash
// of that leaf.
func (l *Log) checkLeaf(rec *Record, tree merkle.Hash) error {
	if rec.LeafHash == tree {
		return nil
	}
	return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(rec.Index), Kind: IntegrityLeafMismatch,
		Detail: fmt.Sprintf("the stored entry hashes to leaf %s, the tree holds %s", rec.LeafHash, tree)})
}

// treeLeaf returns the tree's hash of leaf index (below the committed size)
// from its level-0 tile.
func (l *Log) treeLeaf(index uint64) (merkle.Hash, error) {
	n, off := index/tileWidth, int(index%tileWidth)
	v, closer, err := l.s.db.Get(tileKey(l.id, 0, n))
	if errors.Is(err, pebble.ErrNotFound) {
		return merkle.Hash{}, l.missingTile(0, n, int64(index), "not in storage")
	}
	if err != nil {
		return merkle.Hash{}, fmt.Errorf("ledger: %s: read tile 0/%d: %w", l.name, n, err)
	}
	defer closer.Close()
	w, _, err := tileShape(len(v))
	if err != nil {
		return merkle.Hash{}, l.badTile(0, n, int64(index), err)
	}
	if off >= w {
		return merkle.Hash{}, l.missingTile(0, n, int64(index), fmt.Sprintf("holds %d hashes", w))
	}
	var h merkle.Hash
	copy(h[:], v[off*merkle.HashSize:])
	return h, nil
}

// leafTile returns the base hashes of level-0 tile n, reusing buf; the tile
// must hold at least need of them.
func (l *Log) leafTile(n uint64, need int, index uint64, buf []merkle.Hash) ([]merkle.Hash, error) {
	v, closer, err := l.s.db.Get(tileKey(l.id, 0, n))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, l.missingTile(0, n, int64(index), "not in storage")
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: read tile 0/%d: %w", l.name, n, err)
	}
	defer closer.Close()
	w, _, err := tileShape(len(v))
	if err != nil {
		return nil, l.badTile(0, n, int64(index), err)
	}
	if w < need {
		return nil, l.missingTile(0, n, int64(index), fmt.Sprintf("holds %d hashes, %d needed", w, need))
	}
	buf = buf[:0]
	for i := 0; i < w; i++ {
		var h merkle.Hash
		copy(h[:], v[i*merkle.HashSize:])
		buf = append(buf, h)
	}
	return buf, nil
}

func (l *Log) missingTile(level uint8, n uint64, index int64, detail string) error {
	return l.s.integrity(&IntegrityError{Log: l.name, Index: index, Kind: IntegrityTileMissing,
		Detail: fmt.Sprintf("tile %d/%d the tree needs: %s", level, n, detail)})
}

func (l *Log) badTile(level uint8, n uint64, index int64, err error) error {
	return l.s.integrity(&IntegrityError{Log: l.name, Index: index, Kind: IntegrityTileMismatch,
		Detail: fmt.Sprintf("tile %d/%d: %v", level, n, err)})
}

// hashErr turns a tree hash the committed tree needs but storage lacks
// (errMissingHash from hashReader), or a malformed tile, into an integrity
// failure; index is the entry concerned or -1.
func (l *Log) hashErr(err error, index int64) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errMissingHash):
		return l.s.integrity(&IntegrityError{Log: l.name, Index: index, Kind: IntegrityTileMissing, Detail: err.Error()})
	case errors.Is(err, errBadTile):
		return l.s.integrity(&IntegrityError{Log: l.name, Index: index, Kind: IntegrityTileMismatch, Detail: err.Error()})
	}
	return err
}

// EntryByID returns the entry with the given event id, or ErrNotFound. The
// entry is checked as Entry checks it.
func (l *Log) EntryByID(id string) (*Record, error) {
	rec, err := l.lookupID(id, l.Size())
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// lookupID finds the entry with the given id below size.
func (l *Log) lookupID(id string, size uint64) (*Record, error) {
	return l.findID(idHash(id), id, size)
}

// findID finds the entry with id (whose idHash is h) below size.
func (l *Log) findID(h uint64, id string, size uint64) (*Record, error) {
	idx, err := l.indexLookup(kindIDIndex, h)
	if err != nil {
		return nil, err
	}
	return l.matchID(idx, id, size)
}

// matchID returns the entry among idx (below size) whose id is id. Every
// candidate is checked against the tree before its id is compared: an entry
// whose stored id was altered is an integrity failure, not a miss that would
// let a retry append the event again.
func (l *Log) matchID(idx []uint64, id string, size uint64) (*Record, error) {
	for _, i := range idx {
		if i >= size {
			continue
		}
		rec, err := l.readEntry(i)
		if err != nil {
			return nil, err
		}
		if rec.Leaf.ID == id {
			return rec, nil
		}
	}
	return nil, fmt.Errorf("%w: id %q in %s", ErrNotFound, id, l.name)
}

// IndexByLeafHash returns the index of the leaf with the given hash.
func (l *Log) IndexByLeafHash(h merkle.Hash) (uint64, error) {
	idx, err := l.indexLookup(kindHashIndex, leafHashKey(h))
	if err != nil {
		return 0, err
	}
	size := l.Size()
	r := hashReader{db: l.s.db, log: l.id}
	for _, i := range idx {
		if i >= size {
			continue
		}
		got, err := r.ReadHashes([]merkle.NodeID{merkle.NodeID{Level: 0, Index: i}})
		if err != nil {
			return 0, l.hashErr(err, int64(i))
		}
		if got[0] == h {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: leaf hash %s in %s", ErrNotFound, h, l.name)
}

// HashReader returns a reader of the log's tree hashes. It reads only
// committed state; callers must ask only for nodes below Size().
func (l *Log) HashReader() merkle.HashReader {
	return hashReader{db: l.s.db, log: l.id, cache: l.s.tiles}
}

// InclusionProof proves that entry index is in the tree of the given size.
func (l *Log) InclusionProof(index, size uint64) ([]merkle.Hash, error) {
	if cur := l.Size(); size > cur {
		return nil, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, size, cur)
	}
	p, err := merkle.ProveInclusion(index, size, l.HashReader())
	return p, l.hashErr(err, int64(index))
}

// LeafInclusion returns the hash of leaf index and its inclusion proof in
// the tree of the given size, reading each tile once.
func (l *Log) LeafInclusion(index, size uint64) (merkle.Hash, []merkle.Hash, error) {
	if cur := l.Size(); size > cur {
		return merkle.Hash{}, nil, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, size, cur)
	}
	if index >= size {
		return merkle.Hash{}, nil, fmt.Errorf("%w: index %d is not below tree size %d", ErrRange, index, size)
	}
	var leaf merkle.Hash
	// The proof's reader also fetches the leaf: the level-0 tile the proof
	// reads anyway holds it.
	r := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		hs, err := l.HashReader().ReadHashes(append(ids, merkle.NodeID{Level: 0, Index: index}))
		if err != nil {
			return nil, err
		}
		leaf = hs[len(hs)-1]
		return hs[:len(hs)-1], nil
	})
	p, err := merkle.ProveInclusion(index, size, r)
	if err != nil {
		return merkle.Hash{}, nil, l.hashErr(err, int64(index))
	}
	if size == 1 { // an empty proof reads nothing
		hs, err := l.HashReader().ReadHashes([]merkle.NodeID{{Level: 0, Index: index}})
		if err != nil {
			return merkle.Hash{}, nil, l.hashErr(err, int64(index))
		}
		leaf = hs[0]
	}
	return leaf, p, nil
}

// VerifiedLeafInclusion is LeafInclusion for a proof about to be served: the
// leaf hash and proof, both read from the tiles, are verified before they
// are returned against the root the log vouches for at size (see
// trustedRoot). A stored hash on the proof's path that was altered, or the
// leaf's own, is an *IntegrityError of kind IntegrityRootMismatch instead
// of a wrong proof.
func (l *Log) VerifiedLeafInclusion(index, size uint64) (merkle.Hash, []merkle.Hash, error) {
	leaf, p, err := l.LeafInclusion(index, size)
	if err != nil {
		return merkle.Hash{}, nil, err
	}
	root, err := l.trustedRoot(size)
	if err != nil {
		return merkle.Hash{}, nil, err
	}
	if err := merkle.VerifyInclusion(index, size, leaf, p, root); err != nil {
		return merkle.Hash{}, nil, l.s.integrity(&IntegrityError{Log: l.name, Index: int64(index), Kind: IntegrityRootMismatch,
			Detail: fmt.Sprintf("the inclusion proof in the tree of size %d built from the stored tiles does not lead to the root %s: %v", size, root, err)})
	}
	return leaf, p, nil
}

// trustedRoot returns the root of the tree of the given size (at most the
// committed size) as the log vouches for it. The anchor is the latest
// signed checkpoint, or for a size beyond it the committed tree, whose root
// the writer computed from the appended leaves (and open checked against the
// tiles). A size other than the anchor's gets the root rebuilt from the
// tiles, accepted only with a consistency proof (also from the tiles) that
// verifies against the anchor's root.
func (l *Log) trustedRoot(size uint64) (merkle.Hash, error) {
	st := l.committed.Load()
	asize, aroot, what := st.size, st.root, "committed tree"
	if cp := l.cp.Load(); cp != nil && size <= cp.Size {
		asize, aroot, what = cp.Size, cp.Root, "signed checkpoint"
	}
	if size == asize {
		return aroot, nil
	}
	if size > asize {
		return merkle.Hash{}, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, size, asize)
	}
	root, err := l.RootAt(size)
	if err != nil {
		return merkle.Hash{}, err
	}
	p, err := l.ConsistencyProof(size, asize)
	if err != nil {
		return merkle.Hash{}, err
	}
	if err := merkle.VerifyConsistency(size, asize, p, root, aroot); err != nil {
		return merkle.Hash{}, l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRootMismatch,
			Detail: fmt.Sprintf("the root %s of size %d rebuilt from the stored tiles is not consistent with the %s at size %d: %v", root, size, what, asize, err)})
	}
	return root, nil
}

// ConsistencyProof proves that the tree of size to extends the tree of size
// from.
func (l *Log) ConsistencyProof(from, to uint64) ([]merkle.Hash, error) {
	if cur := l.Size(); to > cur {
		return nil, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, to, cur)
	}
	p, err := merkle.ProveConsistency(from, to, l.HashReader())
	return p, l.hashErr(err, -1)
}

// RootAt returns the root hash of the tree of the given size.
func (l *Log) RootAt(size uint64) (merkle.Hash, error) {
	if cur := l.Size(); size > cur {
		return merkle.Hash{}, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, size, cur)
	}
	h, err := merkle.RootHash(size, l.HashReader())
	return h, l.hashErr(err, -1)
}

// Checkpoints returns the stored signed checkpoints with sizes in [from,
// to], oldest first, at most limit of them (0: no limit).
func (l *Log) Checkpoints(from, to uint64, limit int) ([]*SignedCheckpoint, error) {
	upper := logKey(kindCheckpoint, l.id+1, 0) // the end of this log's checkpoints
	if to != ^uint64(0) {
		upper = checkpointKey(l.id, to+1)
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: checkpointKey(l.id, from), UpperBound: upper})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*SignedCheckpoint
	for it.First(); it.Valid() && (limit <= 0 || len(out) < limit); it.Next() {
		cp, err := l.parseCheckpoint(it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, it.Error()
}

// Tile returns the first width hashes of the C2SP tile at tile level level
// and index n (hashes of tree level 8*level), concatenated. The committed
// tree must hold that many; otherwise ErrNotFound.
func (l *Log) Tile(level uint8, n uint64, width int) ([]byte, error) {
	if width < 1 || width > tileWidth || level > 7 {
		return nil, fmt.Errorf("%w: tile %d/%d width %d", ErrRange, level, n, width)
	}
	count := l.Size() >> (tileHeight * uint(level)) // hashes at this level
	if n >= count/tileWidth+1 || n*tileWidth+uint64(width) > count {
		return nil, fmt.Errorf("%w: tile %d/%d of width %d is beyond the tree", ErrNotFound, level, n, width)
	}
	v, closer, err := l.s.db.Get(tileKey(l.id, level, n))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, l.missingTile(level, n, -1, "not in storage")
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: read tile %d/%d: %w", l.name, level, n, err)
	}
	defer closer.Close()
	w, _, err := tileShape(len(v))
	if err != nil {
		return nil, l.badTile(level, n, -1, err)
	}
	if w < width {
		return nil, l.missingTile(level, n, -1, fmt.Sprintf("holds %d hashes, %d asked for", w, width))
	}
	return append([]byte(nil), v[:width*merkle.HashSize]...), nil
}

// ScanEntries is Entries for bulk readers that trust this process's storage
// (derivation folds): each record carries its leaf hash, read from the
// tree's level-0 tiles (one read per 256 entries), but not the leaf bytes or
// the payload hash, which Entries recomputes from the entry. It does not
// check the entries against the tree: a payload altered in storage is folded
// as it is. The scrub (package checkers) recomputes every leaf and tile and
// is what covers these reads. A missing or undecodable entry or a missing
// tile is still an *IntegrityError. It is safe to call concurrently.
func (l *Log) ScanEntries(ctx context.Context, from, to uint64, fn func(*Record) error) error {
	return l.entries(ctx, from, to, false, fn)
}

// Entries calls fn with the entries [from, to) in index order, reading them
// in one pass. to must not exceed the committed size. fn must not keep the
// record after it returns; an error from fn stops the scan. Each entry's
// recomputed leaf hash is checked against the tree's level-0 tile (one read
// per 256 entries): a missing, undecodable or altered entry stops the scan
// with an *IntegrityError.
func (l *Log) Entries(ctx context.Context, from, to uint64, fn func(*Record) error) error {
	return l.entries(ctx, from, to, true, fn)
}

// entries scans [from, to). With leaf, each record's leaf is recomputed and
// checked against the tree's; without, the record takes the tree's leaf
// hash.
func (l *Log) entries(ctx context.Context, from, to uint64, leaf bool, fn func(*Record) error) error {
	var (
		slab recordSlab
		rec  *Record
	)
	return l.scanStored(ctx, from, to, func(idx uint64, v []byte) (err error) {
		rec, err = l.decodeEntry(idx, v, leaf, &slab)
		return err
	}, func(idx uint64, tree merkle.Hash) error {
		if !leaf {
			rec.LeafHash = tree
		} else if err := l.checkLeaf(rec, tree); err != nil {
			return err
		}
		return fn(rec)
	})
}

// scanStored reads the stored entries [from, to) in one pass, in index
// order: for each, decode takes its stored value (valid during the call),
// then use takes the leaf hash the tree's level-0 tile holds for it (one
// tile read per 256 entries, after the entry's decode, so that a damaged
// entry is reported before a damaged tile). to must not exceed the
// committed size; a missing entry or tile is an *IntegrityError, an error
// from decode or use stops the scan with that error.
func (l *Log) scanStored(ctx context.Context, from, to uint64, decode func(idx uint64, v []byte) error, use func(idx uint64, tree merkle.Hash) error) error {
	if size := l.Size(); to > size || from > to {
		return fmt.Errorf("%w: entries [%d, %d), tree size %d", ErrRange, from, to, size)
	}
	if from == to {
		return nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(l.id, from), UpperBound: entryKey(l.id, to)})
	if err != nil {
		return err
	}
	defer it.Close()
	tile, base := ^uint64(0), make([]merkle.Hash, 0, tileWidth)
	want := from
	for ok := it.First(); ok; ok = it.Next() {
		if want&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		idx := binary.BigEndian.Uint64(k[len(k)-8:])
		if idx != want {
			return l.missingEntry(want)
		}
		if err := decode(idx, it.Value()); err != nil {
			return err
		}
		if n := idx / tileWidth; n != tile {
			// The tile must hold the hashes of this scan's entries in it.
			need := int(min(to-n*tileWidth, tileWidth))
			if base, err = l.leafTile(n, need, idx, base); err != nil {
				return err
			}
			tile = n
		}
		if err := use(idx, base[idx%tileWidth]); err != nil {
			return err
		}
		want++
	}
	if err := it.Error(); err != nil {
		return err
	}
	if want != to {
		return l.missingEntry(want)
	}
	return nil
}

// LedgeredAt returns when the entry at index was ledgered: when the group
// commit that appended it was staged, by the store's clock (WithClock). It
// is what a drift check's grace period counts from, whatever time the event
// itself carries (a backfill of old events, an event dated in the future).
// ok is false for an entry ledgered before auditd recorded these times, or
// an index at or past the tree size.
func (l *Log) LedgeredAt(index uint64) (t time.Time, ok bool, err error) {
	if index >= l.Size() {
		return time.Time{}, false, nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: ledgeredKey(l.id, index+1), UpperBound: logKey(kindLedgered, l.id+1, 0)})
	if err != nil {
		return time.Time{}, false, err
	}
	defer it.Close()
	if !it.First() {
		return time.Time{}, false, it.Error()
	}
	if len(it.Value()) != 8 {
		return time.Time{}, false, fmt.Errorf("ledger: %s: ledgered time of %d: %d bytes", l.name, index, len(it.Value()))
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(it.Value()))), true, nil
}

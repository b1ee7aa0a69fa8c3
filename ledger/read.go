package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// Entry returns the entry at index.
func (l *Log) Entry(index uint64) (*Record, error) {
	if size := l.Size(); index >= size {
		return nil, fmt.Errorf("%w: index %d, tree size %d", ErrRange, index, size)
	}
	return l.readEntry(index)
}

func (l *Log) readEntry(index uint64) (*Record, error) {
	v, closer, err := l.s.db.Get(entryKey(l.id, index))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("ledger: %s: entry %d missing from storage", l.name, index)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: read %s/%d: %w", l.name, index, err)
	}
	defer closer.Close()
	return decodeStored(l.name, index, v)
}

// EntryByID returns the entry with the given event id, or ErrNotFound.
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

// matchID returns the entry among idx (below size) whose id is id.
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
			return 0, err
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
	return merkle.ProveInclusion(index, size, l.HashReader())
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
		return merkle.Hash{}, nil, err
	}
	if size == 1 { // an empty proof reads nothing
		hs, err := l.HashReader().ReadHashes([]merkle.NodeID{{Level: 0, Index: index}})
		if err != nil {
			return merkle.Hash{}, nil, err
		}
		leaf = hs[0]
	}
	return leaf, p, nil
}

// ConsistencyProof proves that the tree of size to extends the tree of size
// from.
func (l *Log) ConsistencyProof(from, to uint64) ([]merkle.Hash, error) {
	if cur := l.Size(); to > cur {
		return nil, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, to, cur)
	}
	return merkle.ProveConsistency(from, to, l.HashReader())
}

// RootAt returns the root hash of the tree of the given size.
func (l *Log) RootAt(size uint64) (merkle.Hash, error) {
	if cur := l.Size(); size > cur {
		return merkle.Hash{}, fmt.Errorf("%w: tree size %d is beyond the log's size %d", ErrRange, size, cur)
	}
	return merkle.RootHash(size, l.HashReader())
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
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: read tile %d/%d: %w", l.name, level, n, err)
	}
	defer closer.Close()
	if len(v) < width*merkle.HashSize {
		return nil, fmt.Errorf("ledger: %s: tile %d/%d holds fewer than %d hashes", l.name, level, n, width)
	}
	return append([]byte(nil), v[:width*merkle.HashSize]...), nil
}

// ScanEntries is Entries for bulk readers that trust this process's storage
// (derivation folds): each record carries its leaf hash, read from the
// tree's level-0 tiles (one read per 256 entries), but not the leaf bytes or
// the payload hash, which Entries recomputes from the entry. It is safe to
// call concurrently.
func (l *Log) ScanEntries(ctx context.Context, from, to uint64, fn func(*Record) error) error {
	tile, base := ^uint64(0), []merkle.Hash(nil)
	return l.entries(ctx, from, to, false, func(rec *Record) error {
		if n := rec.Index / tileWidth; n != tile {
			v, closer, err := l.s.db.Get(tileKey(l.id, 0, n))
			if err != nil {
				return fmt.Errorf("ledger: %s: read tile 0/%d: %w", l.name, n, err)
			}
			b, _, err := decodeTile(v)
			if err == nil {
				base = append(base[:0], b...)
			}
			closer.Close()
			if err != nil {
				return err
			}
			tile = n
		}
		i := rec.Index % tileWidth
		if i >= uint64(len(base)) {
			return fmt.Errorf("ledger: %s: tile 0/%d holds %d hashes, entry %d needs %d", l.name, tile, len(base), rec.Index, i+1)
		}
		rec.LeafHash = base[i]
		return fn(rec)
	})
}

// Entries calls fn with the entries [from, to) in index order, reading them
// in one pass. to must not exceed the committed size. fn must not keep the
// record after it returns; an error from fn stops the scan.
func (l *Log) Entries(ctx context.Context, from, to uint64, fn func(*Record) error) error {
	return l.entries(ctx, from, to, true, fn)
}

func (l *Log) entries(ctx context.Context, from, to uint64, leaf bool, fn func(*Record) error) error {
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
			return fmt.Errorf("ledger: %s: entry %d missing from storage", l.name, want)
		}
		rec, err := decodeStoredAs(l.name, idx, it.Value(), leaf)
		if err != nil {
			return err
		}
		if err := fn(rec); err != nil {
			return err
		}
		want++
	}
	if err := it.Error(); err != nil {
		return err
	}
	if want != to {
		return fmt.Errorf("ledger: %s: entry %d missing from storage", l.name, want)
	}
	return nil
}

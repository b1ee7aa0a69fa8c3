package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/auditd/auditd/merkle"
)

// The id and leaf-hash indexes are kept out of the memtable, where random
// keys cost most of the append path: the index of the newest, incomplete
// chunk of indexChunk entries lives in memory (rebuilt from the entries after
// a restart), and each completed chunk is written as one sorted sstable per
// index under its own key prefix and ingested. Its keys sort after every
// earlier chunk's, so it lands in the bottom level and is never compacted.
// A lookup probes the memory index, then each chunk's bloom filter.
const (
	indexChunkBits = 16
	indexChunk     = 1 << indexChunkBits
)

// idHash and leafHashKey are the 64-bit index keys of an id and a leaf hash.
func idHash(id string) uint64 {
	h := sha256.Sum256([]byte(id))
	return binary.BigEndian.Uint64(h[:8])
}

func leafHashKey(h merkle.Hash) uint64 { return binary.BigEndian.Uint64(h[:8]) }

// chunkKey is kind, log, chunk, hash: the key of one index entry.
func chunkKey(kind byte, log uint32, chunk uint32, h uint64) []byte {
	k := binary.BigEndian.AppendUint32(logKey(kind, log, 12), chunk)
	return binary.BigEndian.AppendUint64(k, h)
}

// tailIndex indexes the entries at and above start: those not yet in an
// ingested chunk. Readers, the writer and the chunk ingester share it.
type tailIndex struct {
	mu    sync.RWMutex
	start uint64
	// ids and hashes list the index entries in index order, so a chunk is a
	// prefix; byID and byHash find them (first index, then collisions).
	ids, hashes   []indexEntry
	byID, byHash  map[uint64]uint64
	moreID, moreH map[uint64][]uint64
}

type indexEntry struct {
	h     uint64
	index uint64
}

func (t *tailIndex) reset(start uint64) {
	t.mu.Lock()
	t.start, t.ids, t.hashes = start, nil, nil
	t.byID, t.byHash = map[uint64]uint64{}, map[uint64]uint64{}
	t.moreID, t.moreH = map[uint64][]uint64{}, map[uint64][]uint64{}
	t.mu.Unlock()
}

func put(first map[uint64]uint64, more map[uint64][]uint64, h, index uint64) {
	if _, ok := first[h]; ok {
		more[h] = append(more[h], index)
		return
	}
	first[h] = index
}

func (t *tailIndex) add(items []*item) {
	t.mu.Lock()
	for _, it := range items {
		lh := leafHashKey(it.hash)
		t.ids = append(t.ids, indexEntry{it.idh, it.index})
		t.hashes = append(t.hashes, indexEntry{lh, it.index})
		put(t.byID, t.moreID, it.idh, it.index)
		put(t.byHash, t.moreH, lh, it.index)
	}
	t.mu.Unlock()
}

func (t *tailIndex) lookup(kind byte, h uint64) []uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	first, more := t.byID, t.moreID
	if kind == kindHashIndex {
		first, more = t.byHash, t.moreH
	}
	i, ok := first[h]
	if !ok {
		return nil
	}
	return append([]uint64{i}, more[h]...)
}

// chunk returns the index entries of chunk c, sorted by hash.
func (t *tailIndex) chunk(kind byte, c uint64) []indexEntry {
	t.mu.RLock()
	list := t.ids
	if kind == kindHashIndex {
		list = t.hashes
	}
	lo, hi := c<<indexChunkBits, (c+1)<<indexChunkBits
	var out []indexEntry
	for _, e := range list { // in index order: the chunk is a run
		if e.index >= hi {
			break
		}
		if e.index >= lo {
			out = append(out, e)
		}
	}
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b indexEntry) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		if a.index < b.index {
			return -1
		}
		return 1
	})
	return out
}

// dropBelow forgets the entries below boundary (now in an ingested chunk).
func (t *tailIndex) dropBelow(boundary uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	drop := func(list []indexEntry, first map[uint64]uint64, more map[uint64][]uint64) []indexEntry {
		n := 0
		for n < len(list) && list[n].index < boundary {
			h := list[n].h
			if rest, ok := more[h]; ok {
				// Collisions: keep the indexes at or above boundary.
				all := append([]uint64{first[h]}, rest...)
				var keep []uint64
				for _, i := range all {
					if i >= boundary {
						keep = append(keep, i)
					}
				}
				delete(more, h)
				delete(first, h)
				for _, i := range keep {
					put(first, more, h, i)
				}
			} else if first[h] < boundary {
				delete(first, h)
			}
			n++
		}
		return slices.Clone(list[n:])
	}
	t.ids = drop(t.ids, t.byID, t.moreID)
	t.hashes = drop(t.hashes, t.byHash, t.moreH)
	t.start = boundary
}

// indexLookup returns the indexes filed under h in the kind index: the
// memory index first, then every ingested chunk, newest first. The order of
// the two reads matters: the writer counts a chunk as ingested before it
// drops the chunk from memory.
func (l *Log) indexLookup(kind byte, h uint64) ([]uint64, error) {
	out := l.tail.lookup(kind, h)
	n := l.chunks.Load()
	if n == 0 {
		return out, nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{
		LowerBound:   logKey(kind, l.id, 0),
		UpperBound:   logKey(kind, l.id+1, 0),
		UseL6Filters: true,
	})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for c := n; c > 0; c-- {
		key := chunkKey(kind, l.id, uint32(c-1), h)
		if it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key) {
			idx, ok := decodeIndexes(it.Value())
			if !ok {
				return nil, fmt.Errorf("ledger: %s: corrupt index value", l.name)
			}
			out = append(out, idx...)
		}
	}
	return out, it.Error()
}

// ingestChunks writes and ingests every complete chunk below size that is
// still in memory, then drops it from memory. The writer runs it after a
// commit (measured: no faster in the background, where it competes for the
// same two cores).
func (l *Log) ingestChunks(size uint64) error {
	for c := l.chunks.Load(); (c+1)<<indexChunkBits <= size; c++ {
		for _, kind := range []byte{kindIDIndex, kindHashIndex} {
			if err := l.ingestChunk(kind, c); err != nil {
				return fmt.Errorf("ledger: %s: index chunk %d: %w", l.name, c, err)
			}
		}
		if err := l.s.db.Set(chunksKey(l.id), binary.BigEndian.AppendUint64(nil, c+1), pebble.Sync); err != nil {
			return err
		}
		l.chunks.Store(c + 1)
		l.tail.dropBelow((c + 1) << indexChunkBits)
	}
	return nil
}

func (l *Log) ingestChunk(kind byte, c uint64) error {
	entries := l.tail.chunk(kind, c)
	if len(entries) == 0 {
		return errors.New("no index entries in memory")
	}
	path := filepath.Join(l.s.dir, fmt.Sprintf("index-%c-%d-%d.sst", kind, l.id, c))
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer os.Remove(path) // Ingest links the file into the store
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), l.s.po.MakeWriterOptions(6, l.s.db.TableFormat()))
	var val []byte
	for i := 0; i < len(entries); {
		h := entries[i].h
		val = val[:0]
		for ; i < len(entries) && entries[i].h == h; i++ {
			val = binary.AppendUvarint(val, entries[i].index)
		}
		if err := w.Set(chunkKey(kind, l.id, uint32(c), h), val); err != nil {
			w.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return l.s.db.Ingest(context.Background(), []string{path})
}

// loadIndex restores the chunk count and rebuilds the memory index and the
// id filter: ingested chunks' keys are scanned, newer entries are read.
func (l *Log) loadIndex(size uint64) (idFilter, error) {
	var f idFilter
	var chunks uint64
	v, closer, err := l.s.db.Get(chunksKey(l.id))
	switch {
	case err == nil:
		chunks = binary.BigEndian.Uint64(v)
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return f, err
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(kindIDIndex, l.id, 0), UpperBound: logKey(kindIDIndex, l.id+1, 0)})
	if err != nil {
		return f, err
	}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == 17 {
			f.add(binary.BigEndian.Uint64(k[9:]))
		}
	}
	if err := it.Close(); err != nil {
		return f, err
	}
	start := chunks << indexChunkBits
	l.tail.reset(start)
	l.chunks.Store(chunks)
	var items []*item
	for i := start; i < size; i++ {
		rec, err := l.readEntry(i)
		if err != nil {
			return f, err
		}
		it := &item{idh: idHash(rec.Leaf.ID), hash: rec.LeafHash, index: i}
		f.add(it.idh)
		items = append(items, it)
	}
	l.tail.add(items)
	return f, l.ingestChunks(size)
}

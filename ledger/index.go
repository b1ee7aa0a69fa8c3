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
// ingested chunk. Readers and the writer share it.
type tailIndex struct {
	mu     sync.RWMutex
	start  uint64
	ids    map[uint64][]uint64
	hashes map[uint64][]uint64
}

func (t *tailIndex) reset(start uint64) {
	t.mu.Lock()
	t.start, t.ids, t.hashes = start, map[uint64][]uint64{}, map[uint64][]uint64{}
	t.mu.Unlock()
}

func (t *tailIndex) add(items []*item) {
	t.mu.Lock()
	for _, it := range items {
		t.ids[it.idh] = append(t.ids[it.idh], it.index)
		lh := leafHashKey(it.hash)
		t.hashes[lh] = append(t.hashes[lh], it.index)
	}
	t.mu.Unlock()
}

func (t *tailIndex) lookup(kind byte, h uint64) []uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m := t.ids
	if kind == kindHashIndex {
		m = t.hashes
	}
	return slices.Clone(m[h])
}

// chunk returns the sorted index entries of chunk c (below end) from the
// memory index.
func (t *tailIndex) chunk(kind byte, c uint64) []indexEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	m := t.ids
	if kind == kindHashIndex {
		m = t.hashes
	}
	lo, hi := c<<indexChunkBits, (c+1)<<indexChunkBits
	var out []indexEntry
	for h, idx := range m {
		for _, i := range idx {
			if i >= lo && i < hi {
				out = append(out, indexEntry{h, i})
			}
		}
	}
	slices.SortFunc(out, func(a, b indexEntry) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return int(a.index) - int(b.index)
	})
	return out
}

// dropBelow forgets the entries below boundary (now in an ingested chunk).
func (t *tailIndex) dropBelow(boundary uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []map[uint64][]uint64{t.ids, t.hashes} {
		for h, idx := range m {
			k := 0
			for _, i := range idx {
				if i >= boundary {
					idx[k] = i
					k++
				}
			}
			if k == 0 {
				delete(m, h)
			} else {
				m[h] = idx[:k]
			}
		}
	}
	t.start = boundary
}

type indexEntry struct {
	h     uint64
	index uint64
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
// still in memory, then drops it from memory. It runs on the writer.
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

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
	packed := l.tail.packedFrom.Load()
	for c := n; c > 0; c-- {
		if c-1 >= packed {
			key := packedKey(kind, l.id, uint32(c-1), byte(h>>56))
			if it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key) {
				if out, err = packedLookup(it.Value(), kind, c-1, h, out); err != nil {
					return nil, fmt.Errorf("ledger: %s: index chunk %d: %w", l.name, c-1, err)
				}
			}
			continue
		}
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
// still in memory, then drops it from memory. The publisher runs it after
// a group commit is durable (no faster in a goroutine of its own:
// docs/perf/decisions.md), while
// the writer may look ids up: indexLookup reads the tail before the chunk
// count, and this stores the count after the ingest and before the drop,
// so a lookup finds an id in one or the other.
func (l *Log) ingestChunks(size uint64) error {
	if err := l.s.space.err(); err != nil {
		return err // an ingest writes a table and may start a WAL: later
	}
	for c := l.chunks.Load(); (c+1)<<indexChunkBits <= size; c++ {
		for _, kind := range []byte{kindIDIndex, kindHashIndex} {
			if err := l.ingestChunk(kind, c); err != nil {
				return fmt.Errorf("ledger: %s: index chunk %d: %w", l.name, c, err)
			}
		}
		if err := l.s.write(func() error {
			return l.s.db.Set(chunksKey(l.id), encodeChunks(c+1, l.tail.packedFrom.Load()), pebble.Sync)
		}); err != nil {
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
	if err := packChunk(kind, l.id, c, entries, w.Set); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return l.s.write(func() error { return l.s.db.Ingest(context.Background(), []string{path}) })
}

// loadIndex restores the chunk count and rebuilds the memory index and the
// id filter: ingested chunks' keys are scanned, newer entries are read.
func (l *Log) loadIndex(size uint64) (idFilter, error) {
	var f idFilter
	var chunks, packed uint64
	v, closer, err := l.s.db.Get(chunksKey(l.id))
	switch {
	case err == nil:
		chunks, packed, err = decodeChunks(v)
		closer.Close()
		if err != nil {
			return f, fmt.Errorf("ledger: %s: %w", l.name, err)
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return f, err
	}
	l.tail.packedFrom.Store(packed)
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(kindIDIndex, l.id, 0), UpperBound: logKey(kindIDIndex, l.id+1, 0)})
	if err != nil {
		return f, err
	}
	for it.First(); it.Valid(); it.Next() {
		switch k := it.Key(); len(k) {
		case 17: // layout 1
			f.add(binary.BigEndian.Uint64(k[9:]))
		case packedKeyLen:
			// A malformed bucket is not fatal here: its ids are all
			// "maybe", and a lookup that reads it fails with the error.
			if err := packedKeys(it.Value(), kindIDIndex, k[9], f.add); err != nil {
				f.addUnknown(k[9])
				l.s.log.Error("id index bucket does not decode", "log", l.name, "chunk", binary.BigEndian.Uint32(k[5:]), "bucket", k[9], "err", err)
			}
		}
	}
	if err := it.Close(); err != nil {
		return f, err
	}
	start := chunks << indexChunkBits
	l.tail.reset(start)
	l.chunks.Store(chunks)
	// A cheap look at the entries the indexes already cover: the last entry
	// of every ingested chunk must be there and match its leaf (two point
	// reads per 65,536 entries). A failure is reported (logged, counted,
	// handed to the integrity handler) but does not stop the log: reads of
	// the entry answer with the same error, and the scrub looks at the rest.
	for c := uint64(0); c < chunks; c++ {
		if _, err := l.readEntry((c+1)<<indexChunkBits - 1); err != nil && !errors.Is(err, ErrIntegrity) {
			return f, err
		}
	}
	// The entries above the last chunk are read in full and checked against
	// the tree: the memory index is rebuilt from them.
	ids, hashes, err := l.tailEntries(start, size)
	if err != nil {
		return f, err
	}
	for _, e := range ids {
		f.add(e.h)
	}
	l.tail.addEntries(ids, hashes)
	return f, l.ingestChunks(size)
}

// tailEntries reads the entries [from, to) for the memory index and returns
// their id and leaf-hash index entries. Every leaf hash indexed is the
// tree's (from the level-0 tiles), and every id that is stored. A damaged
// entry or tile is reported (logged, counted, handed to the integrity
// handler) and does not fail the open: reads of it answer with the
// integrity error, as they do for entries in ingested chunks. An entry that
// is missing or does not decode has no id to index, so a retry of its event
// would be appended again; the open reports it, and whether such a log
// should take appends is the open's decision, not the index's.
func (l *Log) tailEntries(from, to uint64) (ids, hashes []indexEntry, err error) {
	if from == to {
		return nil, nil, nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(l.id, from), UpperBound: entryKey(l.id, to)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	ok := it.First()
	var base []merkle.Hash
	for n := from / tileWidth; n*tileWidth < to; n++ {
		lo, hi := max(from, n*tileWidth), min(to, (n+1)*tileWidth)
		base, err = l.leafTile(n, int(hi-n*tileWidth), lo, base[:0])
		if err != nil && !errors.Is(err, ErrIntegrity) {
			return nil, nil, err
		}
		tileOK := err == nil
		for i := lo; i < hi; i++ {
			if tileOK {
				hashes = append(hashes, indexEntry{leafHashKey(base[i%tileWidth]), i})
			}
			var rec *Record
			if ok {
				if k := it.Key(); binary.BigEndian.Uint64(k[len(k)-8:]) == i {
					// Decoded before Next, which reuses the value's buffer.
					rec, err = l.decodeEntry(i, it.Value(), true, nil)
					ok = it.Next()
					if err != nil {
						continue
					}
				}
			}
			if rec == nil {
				_ = l.missingEntry(i)
				continue
			}
			if tileOK {
				_ = l.checkLeaf(rec, base[i%tileWidth])
			}
			// Indexed even if it does not match its leaf: a retry of the
			// event then finds the entry and fails on it, where a missing
			// id would append the event again.
			ids = append(ids, indexEntry{idHash(rec.Leaf.ID), i})
		}
	}
	return ids, hashes, it.Error()
}

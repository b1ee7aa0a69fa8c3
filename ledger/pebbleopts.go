package ledger

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// Pebble settings of the storage layout (see "Pebble storage layout" in
// docs/ledger-format.md):
//
//   - columnar sstables (table format v6): a key costs its unshared bytes
//     and a few bits of offsets instead of a row's varints and 8-byte
//     trailer;
//   - 32 KiB data blocks: an entry is ~300 bytes, so a 4 KiB block holds
//     about 13 and its header, column offsets and checksum cost ~8 bytes
//     per entry;
//   - Bloom filters (10 bits per key) on every key but entries, which
//     are always present when asked for (read only below the tree size);
//   - level 0 compacted as soon as it holds a table, and flushed tables
//     up to 64 MiB, so that a flush's entries are one table that Pebble
//     moves down the levels instead of rewriting it (see below).
const (
	storeFormat    = pebble.FormatTableFormatV6
	storeBlockSize = 32 << 10
	bloomBits      = 10

	l0CompactionThreshold = 1
	l0TargetFileSize      = 64 << 20
)

// pebbleOptions returns the Pebble options of a store. The caller sets the
// cache and logger, and may change the rest before Open.
func pebbleOptions() *pebble.Options {
	po := &pebble.Options{FormatMajorVersion: storeFormat}
	// Tables written before the filters below existed carry the stock
	// Bloom filter, or the ledger filter of storage layout 2 as first
	// built; both stay registered so that their filters are read.
	stock := bloom.FilterPolicy(bloomBits)
	po.Filters = map[string]pebble.FilterPolicy{stock.Name(): stock, ledgerFilterV1{stock}.Name(): ledgerFilterV1{stock}}
	po.Experimental.SpanPolicyFunc = tableSpan
	// Entries are written once by a flush and then should only move: a
	// compaction whose one input table overlaps nothing in the level below
	// is a move (Pebble's maybeSwitchToMoveOrCopy), but an L0 compaction
	// takes in every level-0 table between its base-level neighbours
	// (growL0ForBase). So each flush has to leave its entries as one table
	// (no split at 2 MiB: the memtable is 16 MiB) and level 0 has to be
	// compacted before the next flush puts a second table of entries
	// beside it (a threshold of one sublevel). The tiles get tables of
	// their own per level (tableSpan), so that compacting them does not
	// rewrite the entries either. TestEntriesMoveDown checks the moves;
	// docs/perf/decisions.md has what they saved.
	po.L0CompactionThreshold = l0CompactionThreshold
	po.TargetFileSizes[0] = l0TargetFileSize
	for i := 1; i < len(po.TargetFileSizes); i++ {
		po.TargetFileSizes[i] = 4 << 20 << (i - 1) // Pebble's defaults: Lbase 4 MiB, doubling below it
	}
	po.FlushSplitBytes = 2 * l0TargetFileSize
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = ledgerFilter{stock}
		po.Levels[i].BlockSize = storeBlockSize
	}
	return po
}

// ledgerFilter is a Bloom filter over every key but entry keys, which are
// always present when asked for (entries are read only below the tree
// size). It has its own name, so a tool that opens the store with the
// stock Bloom filter ignores these filters (which lack the entry keys)
// instead of trusting them.
//
// Packed index keys (one per bucket of an ingested index chunk) are in it:
// they are always present in their chunk's table, but every flushed table
// spans their key range too (it holds entries and tiles, whose kinds sort
// around the index's), and a lookup of an id (every append's whose id the
// id filter cannot rule out) seeks each chunk's bucket through all of
// them. Without the keys in the filter each such seek read a data block of
// every one.
type ledgerFilter struct{ bloom pebble.FilterPolicy }

// filtered reports whether a key goes into the filter.
func filtered(key []byte) bool { return len(key) == 0 || key[0] != kindEntry }

func (ledgerFilter) Name() string { return "auditd.ledger.bloom10.v2" }

func (f ledgerFilter) MayContain(ft pebble.FilterType, filter, key []byte) bool {
	return !filtered(key) || f.bloom.MayContain(ft, filter, key)
}

func (f ledgerFilter) NewWriter(ft pebble.FilterType) pebble.FilterWriter {
	return filterWriter{f.bloom.NewWriter(ft), filtered}
}

// ledgerFilterV1 reads the filters of tables written before packed index
// keys went into the filter: it answers "maybe" for those keys and entry
// keys, which these filters lack. Nothing is written with it.
type ledgerFilterV1 struct{ bloom pebble.FilterPolicy }

// filteredV1 is filtered as it was: packed index keys left out too.
func filteredV1(key []byte) bool {
	if len(key) == 0 {
		return true
	}
	switch key[0] {
	case kindEntry:
		return false
	case kindIDIndex, kindHashIndex:
		return len(key) != packedKeyLen
	}
	return true
}

func (ledgerFilterV1) Name() string { return "auditd.ledger.bloom10" }

func (f ledgerFilterV1) MayContain(ft pebble.FilterType, filter, key []byte) bool {
	return !filteredV1(key) || f.bloom.MayContain(ft, filter, key)
}

func (f ledgerFilterV1) NewWriter(ft pebble.FilterType) pebble.FilterWriter {
	return filterWriter{f.bloom.NewWriter(ft), filteredV1}
}

type filterWriter struct {
	w    pebble.FilterWriter
	keep func([]byte) bool
}

func (w filterWriter) AddKey(key []byte) {
	if w.keep(key) {
		w.w.AddKey(key)
	}
}

func (w filterWriter) Finish(dst []byte) []byte { return w.w.Finish(dst) }

// tableSpan ends the tables Pebble writes (flushes and compactions) at the
// end of each log's entries, of each log's id and leaf-hash index, and of
// each level of each log's tiles, so that no table holds entries, index
// buckets or tiles together with other keys. The other kinds (checkpoints,
// metadata, names, ...) share tables as Pebble sees fit: a store of many
// logs does not get a table for each log's metadata key.
//
// Tiles of one level are written in order of their index, so each level's
// new tiles sort after its older ones and a compaction of them rewrites
// at most the base-level table holding the tile that was partial. When a
// flushed table held every level's new tiles, its span covered all the
// older tiles of the lower levels, and each compaction of it rewrote them
// all: the base level's tiles, 1.4 MB more with every flush, were
// rewritten with each (most of the 543 MB above).
//
// Without it the table holding a log's newest entries runs on into the
// keys that sort after them (the index buckets, the checkpoints, the
// metadata and tiles every commit writes again). Every flushed table of
// new entries overlaps that table, so no compaction is a move, and an
// ingested index chunk overlaps the flushed tables and lands in level 0
// instead of the bottom level (3M appended entries: 48 compactions, none
// a move, all 90 index tables ingested into L0). With the split, 206 of the
// same run's 266 compactions were moves and every index table was
// ingested into L6 (TestTablesSplitByKind).
//
// A store's own policy (bigLogs.tableSpan) gives tables of their own only
// to logs of bigLogEntries entries or more: the small logs between two big
// ones share their tables. A table each for every log a flush touches
// made a flush of 1,000 one-event logs write 2,700 tables, each synced
// (14 s to open the store again, its WAL replayed), and Pebble keeps every
// table's metadata in memory.
func tableSpan(start []byte) (pebble.SpanPolicy, []byte, error) {
	return spanEnd(splitKinds[:], start, nil)
}

// spanEnd is tableSpan for the given kinds, in key order. With big set,
// the logs it does not hold share tables with the small logs after them,
// up to the next big log.
func spanEnd(kinds []byte, start []byte, big *bigLogs) (pebble.SpanPolicy, []byte, error) {
	var none pebble.SpanPolicy
	k := byte(0)
	if len(start) > 0 {
		k = start[0]
	}
	for _, split := range kinds {
		if k == split && big != nil {
			var id [4]byte // the log id, padded with zeros if the key is short
			copy(id[:], start[1:])
			if log := binary.BigEndian.Uint32(id[:]); !big.has(log) {
				if next, ok := big.next(log); ok {
					return none, logKey(k, next, 0), nil
				}
				return none, []byte{k + 1}, nil
			}
		}
		switch {
		case k < split:
			return none, []byte{split}, nil
		case k == split && k == kindTile:
			var at [5]byte // the log id and the tile level, padded with zeros if the key is short
			copy(at[:], start[1:])
			log, level := binary.BigEndian.Uint32(at[:4]), at[4]
			switch {
			case level < math.MaxUint8:
				return none, append(logKey(k, log, 1), level+1), nil
			case log < math.MaxUint32:
				return none, logKey(k, log+1, 0), nil
			}
			return none, []byte{k + 1}, nil
		case k == split:
			var id [4]byte // the log id, padded with zeros if the key is short
			copy(id[:], start[1:])
			if log := binary.BigEndian.Uint32(id[:]); log < math.MaxUint32 {
				return none, logKey(k, log+1, 0), nil
			}
			return none, []byte{k + 1}, nil
		}
	}
	return none, nil, nil
}

// splitKinds are the kinds tableSpan gives tables of their own, one log
// each (tiles: one level of one log each), in key order.
var splitKinds = [...]byte{kindEntry, kindHashIndex, kindIDIndex, kindTile}

// bigLogEntries is the size from which a log's entries, indexes and tiles
// get tables of their own (see tableSpan): 4,096 entries are about 1 MiB.
const bigLogEntries = 1 << 12

// bigLogs is the set of the ids of a store's logs of bigLogEntries entries
// or more, read by Pebble's flushes and compactions (through tableSpan)
// while the logs grow. It only grows: a sorted slice, copied when a log
// joins (once in a log's life).
type bigLogs struct {
	mu  sync.Mutex
	ids atomic.Pointer[[]uint32]
}

func (b *bigLogs) list() []uint32 {
	if p := b.ids.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *bigLogs) has(log uint32) bool {
	_, ok := slices.BinarySearch(b.list(), log)
	return ok
}

// next returns the first big log after log.
func (b *bigLogs) next(log uint32) (uint32, bool) {
	ids := b.list()
	i, _ := slices.BinarySearch(ids, log+1)
	if i == len(ids) || log == math.MaxUint32 {
		return 0, false
	}
	return ids[i], true
}

func (b *bigLogs) add(log uint32) {
	if b.has(log) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := b.list()
	i, ok := slices.BinarySearch(ids, log)
	if ok {
		return
	}
	ids = slices.Insert(slices.Clone(ids), i, log)
	b.ids.Store(&ids)
}

// tableSpan is the store's SpanPolicyFunc.
func (b *bigLogs) tableSpan(start []byte) (pebble.SpanPolicy, []byte, error) {
	return spanEnd(splitKinds[:], start, b)
}

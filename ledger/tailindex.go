package ledger

import (
	"cmp"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// tailIndex indexes the entries at and above start: those not yet in an
// ingested chunk. Readers, the writer and the chunk ingester share it.
type tailIndex struct {
	// packedFrom is the first chunk in the packed layout (indexpack.go);
	// chunks below it are in layout 1. Set when the log loads.
	packedFrom atomic.Uint64

	mu          sync.RWMutex
	start       uint64
	ids, hashes tailTable
}

type indexEntry struct {
	h     uint64
	index uint64
}

// tailTable is one index of the tail (ids or leaf hashes): its entries in
// index order, so that a chunk is a run of them, and an open-addressing
// hash table over them. A slot holds an entry's position in list plus one
// (0 is empty); entries with the same key take successive slots of one
// probe sequence, in the order they were added, so a lookup finds them in
// index order (docs/perf/decisions.md: why not Go maps).
type tailTable struct {
	list  []indexEntry
	slots []uint32
	shift uint8 // 64 - log2(len(slots))
}

// tailTableMinSlots is the least a table has: a log's tables start small
// and double (1,024 slots made two 4 KiB tables for every log, however
// few its entries).
const tailTableMinSlots = 1 << 4

// slot returns the first slot of key h's probe sequence.
func (t *tailTable) slot(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> t.shift }

func (t *tailTable) add(e indexEntry) {
	if 2*(len(t.list)+1) > len(t.slots) {
		t.resize(2 * (len(t.list) + 1))
	}
	t.list = append(t.list, e)
	t.insert(uint32(len(t.list)))
}

// insert files the entry at position pos-1 of list.
func (t *tailTable) insert(pos uint32) {
	mask := uint64(len(t.slots) - 1)
	i := t.slot(t.list[pos-1].h)
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = pos
}

// resize makes the table at least want slots (a power of two, at least
// tailTableMinSlots) and files every entry of list again, in order.
func (t *tailTable) resize(want int) {
	n := max(tailTableMinSlots, 1<<bits.Len(uint(want-1)))
	if n != len(t.slots) {
		t.slots = make([]uint32, n)
		t.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	} else {
		clear(t.slots)
	}
	for p := range t.list {
		t.insert(uint32(p + 1))
	}
}

// lookup appends to out the indexes filed under h, in index order.
func (t *tailTable) lookup(h uint64, out []uint64) []uint64 {
	if len(t.slots) == 0 {
		return out
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(h); t.slots[i] != 0; i = (i + 1) & mask {
		if e := t.list[t.slots[i]-1]; e.h == h {
			out = append(out, e.index)
		}
	}
	return out
}

// dropBelow forgets the entries below boundary, a prefix of list. The
// table keeps its size: the tail fills it again up to the next chunk.
func (t *tailTable) dropBelow(boundary uint64) {
	n := 0
	for n < len(t.list) && t.list[n].index < boundary {
		n++
	}
	if n == 0 {
		return
	}
	t.list = slices.Clone(t.list[n:])
	t.resize(max(len(t.slots), 2*len(t.list)))
}

// run returns the entries with indexes in [lo, hi), in index order.
func (t *tailTable) run(lo, hi uint64) []indexEntry {
	byIndex := func(e indexEntry, i uint64) int { return cmp.Compare(e.index, i) }
	a, _ := slices.BinarySearchFunc(t.list, lo, byIndex)
	b, _ := slices.BinarySearchFunc(t.list, hi, byIndex)
	return slices.Clone(t.list[a:b])
}

func (t *tailIndex) reset(start uint64) {
	t.mu.Lock()
	t.start, t.ids, t.hashes = start, tailTable{}, tailTable{}
	t.mu.Unlock()
}

func (t *tailIndex) table(kind byte) *tailTable {
	if kind == kindHashIndex {
		return &t.hashes
	}
	return &t.ids
}

func (t *tailIndex) add(items []*item) {
	t.mu.Lock()
	for _, it := range items {
		t.ids.add(indexEntry{it.idh, it.index})
		t.hashes.add(indexEntry{leafHashKey(it.hash), it.index})
	}
	t.mu.Unlock()
}

// addEntries adds index entries, each list in index order.
func (t *tailIndex) addEntries(ids, hashes []indexEntry) {
	t.mu.Lock()
	for _, e := range ids {
		t.ids.add(e)
	}
	for _, e := range hashes {
		t.hashes.add(e)
	}
	t.mu.Unlock()
}

func (t *tailIndex) lookup(kind byte, h uint64) []uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.table(kind).lookup(h, nil)
}

// chunk returns the index entries of chunk c, sorted by hash.
func (t *tailIndex) chunk(kind byte, c uint64) []indexEntry {
	t.mu.RLock()
	out := t.table(kind).run(c<<indexChunkBits, (c+1)<<indexChunkBits)
	t.mu.RUnlock()
	out, _ = sortChunkEntries(out, nil, make([]uint32, 1<<16))
	return out
}

// dropBelow forgets the entries below boundary (now in an ingested chunk).
func (t *tailIndex) dropBelow(boundary uint64) {
	t.mu.Lock()
	t.ids.dropBelow(boundary)
	t.hashes.dropBelow(boundary)
	t.start = boundary
	t.mu.Unlock()
}

package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// IntegrityIndexMismatch is the kind of an ingested id or leaf-hash index
// chunk whose stored keys or values differ from the ones rebuilt from the
// chunk's entries: a lookup of an entry it covers may miss (a retry of its
// event would be appended again) or find a wrong candidate.
const IntegrityIndexMismatch = "index_mismatch"

// chunkKeys holds the index keys of one index chunk's entries, by position
// in the chunk, as a checker rebuilt them from the entries: the id index
// key of each entry's id and the leaf-hash index key of its tree leaf. A
// position not set is unknown (its entry is missing or does not decode)
// and is not judged. It holds about 54 bytes per entry (3.4 MiB with its
// sort buffers).
type chunkKeys struct {
	id, leaf     []uint64
	idOK, leafOK []bool
	exp, tmp     []indexEntry // checkIndexChunk's sort buffers, reused
	count        []uint32
}

// newChunkKeys returns an empty chunkKeys.
func newChunkKeys() *chunkKeys {
	return &chunkKeys{
		id: make([]uint64, indexChunk), leaf: make([]uint64, indexChunk),
		idOK: make([]bool, indexChunk), leafOK: make([]bool, indexChunk),
		count: make([]uint32, 1<<16),
	}
}

// reset forgets every key set.
func (k *chunkKeys) reset() {
	clear(k.idOK)
	clear(k.leafOK)
}

// setID sets the id index key (ScannedEntry.idKey) of the entry at pos.
func (k *chunkKeys) setID(pos int, idKey uint64) { k.id[pos], k.idOK[pos] = idKey, true }

// setLeaf sets the tree leaf hash of the entry at pos.
func (k *chunkKeys) setLeaf(pos int, h merkle.Hash) {
	k.leaf[pos], k.leafOK[pos] = leafHashKey(h), true
}

// IndexFinding is one index chunk of one index that differs from the one
// rebuilt from its entries.
type IndexFinding struct {
	Index string // "id" or "leaf-hash"
	Chunk uint64
	// Entry is the first entry a lookup misses (or, if none, finds wrongly
	// as a candidate); -1 if no one entry is concerned.
	Entry  int64
	Detail string
}

// checkIndexChunk compares ingested index chunk c of both indexes (packed
// or layout 1, as the chunk record says) with the keys rebuilt from its
// entries: a key missing, a key not rebuilt, a value that differs. Records
// of entries whose keys are unknown are left out of the comparison. An
// error is a read failure, not a finding.
func (r *RawLog) checkIndexChunk(c uint64, k *chunkKeys) ([]IndexFinding, error) {
	packedFrom := uint64(0)
	v, closer, err := r.r.Get(chunksKey(r.id))
	switch {
	case err == nil:
		_, packedFrom, _ = decodeChunks(v) // malformed: judged as packed
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return nil, err
	}
	var out []IndexFinding
	for _, kind := range []byte{kindIDIndex, kindHashIndex} {
		keys, known, name := k.id, k.idOK, "id"
		if kind == kindHashIndex {
			keys, known, name = k.leaf, k.leafOK, "leaf-hash"
		}
		t := indexTally{kind: kind, log: r.id, c: c, packed: c >= packedFrom, known: known, entry: -1}
		k.exp = k.exp[:0]
		for pos, h := range keys {
			if known[pos] {
				k.exp = append(k.exp, indexEntry{h, c<<indexChunkBits | uint64(pos)})
			}
		}
		k.exp, k.tmp = sortChunkEntries(k.exp, k.tmp, k.count)
		if err := r.compareChunk(&t, k.exp); err != nil {
			return nil, fmt.Errorf("ledger: %s: check %s index chunk %d: %w", r.name, name, c, err)
		}
		if f, ok := t.finding(name); ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// indexRec is one record of an index value, normalised: the fingerprint
// (packed; 0 in layout 1) and the entry's index.
type indexRec struct {
	fp    uint32
	entry uint64
}

// indexTally compares one chunk of one index and counts what differs.
type indexTally struct {
	kind   byte
	log    uint32
	c      uint64
	packed bool
	known  []bool

	buf                          []indexRec // decode's, reused
	keys, missing, extra, differ int
	first                        string // the first difference, described
	entry                        int64
}

// compareChunk merges the chunk's stored keys with the rebuilt index
// entries exp, both in key order.
func (r *RawLog) compareChunk(t *indexTally, exp []indexEntry) error {
	lo, hi := chunkRange(t.kind, r.id, t.c)
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	var ek []byte
	var ev []indexRec
	g := 0
	next := func() {
		ek, ev = nil, ev[:0]
		if g < len(exp) {
			ek, ev, g = t.group(exp, g, ev)
		}
	}
	next()
	ok := it.First()
	for ok || ek != nil {
		cmp := -1
		switch {
		case !ok:
			cmp = 1
		case ek != nil:
			cmp = bytes.Compare(it.Key(), ek)
		}
		switch {
		case cmp < 0:
			t.keys++
			t.compare(it.Key(), it.Value(), nil)
			ok = it.Next()
		case cmp > 0:
			t.keys++
			t.missing++
			t.note(ek, fmt.Sprintf("key missing (%d records rebuilt)", len(ev)), int64(ev[0].entry))
			next()
		default:
			t.keys++
			t.compare(it.Key(), it.Value(), ev)
			ok = it.Next()
			next()
		}
	}
	return it.Error()
}

// chunkRange returns the key range [lo, hi) of chunk c of kind's index of
// log: its packed buckets and its layout-1 keys alike.
func chunkRange(kind byte, log uint32, c uint64) (lo, hi []byte) {
	lo = binary.BigEndian.AppendUint32(logKey(kind, log, 4), uint32(c))
	hi = binary.BigEndian.AppendUint32(logKey(kind, log, 4), uint32(c+1))
	if uint32(c+1) == 0 {
		hi = logKey(kind, log+1, 0)
	}
	return lo, hi
}

// group returns the key and records of the rebuilt value that starts at
// exp[i], and where the next starts.
func (t *indexTally) group(exp []indexEntry, i int, recs []indexRec) ([]byte, []indexRec, int) {
	if !t.packed {
		h := exp[i].h
		for ; i < len(exp) && exp[i].h == h; i++ {
			recs = append(recs, indexRec{0, exp[i].index})
		}
		return chunkKey(t.kind, t.log, uint32(t.c), h), recs, i
	}
	w := fpBytes(t.kind)
	b := byte(exp[i].h >> 56)
	for ; i < len(exp) && byte(exp[i].h>>56) == b; i++ {
		recs = append(recs, indexRec{fingerprint(exp[i].h, w), exp[i].index})
	}
	return packedKey(t.kind, t.log, uint32(t.c), b), recs, i
}

// compare compares a stored key's value with the rebuilt records (nil: the
// key was not rebuilt).
func (t *indexTally) compare(key, v []byte, want []indexRec) {
	got, err := t.decode(key, v)
	if err != nil {
		t.differ++
		t.note(key, err.Error(), -1)
		return
	}
	if slices.Equal(got, want) {
		return
	}
	if want == nil {
		t.extra++
		t.note(key, fmt.Sprintf("stored with %d records, but no entry's key is filed there", len(got)), int64(got[0].entry))
		return
	}
	t.differ++
	entry, what := firstDiff(want, got)
	t.note(key, fmt.Sprintf("value differs: %d records stored, %d rebuilt; entry %d %s", len(got), len(want), entry, what), int64(entry))
}

// decode returns a stored value's records, less those of entries whose
// keys are unknown.
func (t *indexTally) decode(key, v []byte) ([]indexRec, error) {
	recs := t.buf[:0]
	defer func() { t.buf = recs[:0] }()
	keep := func(e uint64) bool {
		pos := e - t.c<<indexChunkBits
		return e>>indexChunkBits != t.c || t.known[pos]
	}
	if !t.packed {
		if len(key) != 17 {
			return nil, fmt.Errorf("key of %d bytes in a layout-1 chunk", len(key))
		}
		idx, ok := decodeIndexes(v)
		if !ok || len(idx) == 0 {
			return nil, fmt.Errorf("value of %d bytes does not decode", len(v))
		}
		for _, e := range idx {
			if keep(e) {
				recs = append(recs, indexRec{0, e})
			}
		}
		return recs, nil
	}
	w := fpBytes(t.kind)
	if len(key) != packedKeyLen {
		return nil, fmt.Errorf("key of %d bytes in a packed chunk", len(key))
	}
	if len(v)%(w+2) != 0 || len(v) == 0 {
		return nil, fmt.Errorf("value of %d bytes does not decode", len(v))
	}
	for i := 0; i < len(v); i += w + 2 {
		e := t.c<<indexChunkBits | uint64(binary.BigEndian.Uint16(v[i+w:]))
		if keep(e) {
			recs = append(recs, indexRec{recordFP(v[i:], w), e})
		}
	}
	return recs, nil
}

// firstDiff names the first rebuilt record not stored (the entry a lookup
// misses), or else the first stored record not rebuilt.
func firstDiff(want, got []indexRec) (uint64, string) {
	count := map[indexRec]int{}
	for _, r := range got {
		count[r]++
	}
	for _, r := range want {
		if count[r] == 0 {
			return r.entry, "is not found through it"
		}
		count[r]--
	}
	for _, r := range got {
		if count[r] > 0 {
			return r.entry, "is filed under a fingerprint its key does not have"
		}
	}
	return want[0].entry, "is out of order (a lookup's search may miss it)"
}

func (t *indexTally) note(key []byte, what string, entry int64) {
	if t.first != "" {
		return
	}
	where := fmt.Sprintf("key %x", key)
	if len(key) >= packedKeyLen {
		where = fmt.Sprintf("bucket %#02x", key[9])
		if !t.packed && len(key) == 17 {
			where += fmt.Sprintf(" key %x", key[9:])
		}
	}
	t.first, t.entry = where+": "+what, entry
}

func (t *indexTally) finding(name string) (IndexFinding, bool) {
	if t.first == "" {
		return IndexFinding{}, false
	}
	layout := "packed"
	if !t.packed {
		layout = "layout 1"
	}
	return IndexFinding{Index: name, Chunk: t.c, Entry: t.entry, Detail: fmt.Sprintf(
		"%s index chunk %d (%s): %d of %d keys differ from the ones rebuilt from its entries (%d missing, %d not rebuilt, %d with another value); first at %s",
		name, t.c, layout, t.missing+t.extra+t.differ, t.keys, t.missing, t.extra, t.differ, t.first)}, true
}

// sortIndexEntries sorts index entries by key, then index: the order a
// chunk is written in.
func sortIndexEntries(es []indexEntry) {
	slices.SortFunc(es, func(a, b indexEntry) int {
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
}

// sortChunkEntries sorts es by key, then index, as sortIndexEntries does
// (a comparison sort of a chunk cost more than the rest of its check): a
// stable counting sort on the top 16 bits of the key, then an insertion
// sort of the few entries sharing those bits (a comparison sort where
// there are many). It
// returns the sorted slice and the other buffer; tmp and count (1<<16
// counters) are reused.
func sortChunkEntries(es, tmp []indexEntry, count []uint32) (sorted, spare []indexEntry) {
	if len(es) < 2 {
		return es, tmp
	}
	if cap(tmp) < len(es) {
		tmp = make([]indexEntry, len(es))
	}
	tmp = tmp[:len(es)]
	clear(count)
	for _, e := range es {
		count[e.h>>48]++
	}
	sum := uint32(0)
	for i, n := range count {
		count[i], sum = sum, sum+n
	}
	for _, e := range es {
		tmp[count[e.h>>48]] = e
		count[e.h>>48]++
	}
	// count[b] is now the end of the entries whose top bits are b.
	start := uint32(0)
	for _, end := range count {
		if g := tmp[start:end]; len(g) > 32 {
			sortIndexEntries(g) // many keys share the bits: ids ground to
		} else {
			for i := 1; i < len(g); i++ {
				e, j := g[i], i
				for ; j > 0 && (g[j-1].h > e.h || g[j-1].h == e.h && g[j-1].index > e.index); j-- {
					g[j] = g[j-1]
				}
				g[j] = e
			}
		}
		start = end
	}
	return tmp, es
}

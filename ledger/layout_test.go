package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/auditd/auditd/merkle"
)

// Ids that pack come back unchanged and take their packed size; ids that
// do not pack are stored as text.
func TestPackedIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id     string
		packed int // bytes the id takes in the stored entry, header included
	}{
		{"0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6b", 17},
		{"0F8E2C1A-7B3D-4E5F-9A6B-1C2D3E4F5A6B", 17},
		{"01234567-8901-2345-6789-012345678901", 17},
		{"0123456789abcdef0123456789abcdef", 17},
		{"0123456789ABCDEF0123456789ABCDEF", 17},
		{"0123456789abcdef0123456789abcdef0123", 19}, // 36 hex digits, no dashes
		{"42", 2},
		{"0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5A6B", 0}, // mixed case
		{"0f8e2c1a-7b3d-4e5f-9a6b1-c2d3e4f5a6b", 0}, // a dash out of place
		{"0f8e2c1a-7b3d-4e5f-9a6b-1c2d3e4f5a6g", 0},
		{"abc", 0},
		{"ev-000001", 0},
		{"x", 0},
	} {
		l := merkle.Leaf{Log: fuzzLogName, ID: c.id, Time: 5}
		stored := appendStored(nil, &l, []byte("p"), false, false)
		if got := stored[0]&sPackedID != 0; got != (c.packed > 0) {
			t.Errorf("%q: packed %v, want %v", c.id, got, c.packed > 0)
		}
		want := 1 + len(c.id) + 8 + 1 + 1 // flags, length, id, time, payload
		if c.packed > 0 {
			want = 1 + c.packed + 8 + 1
		}
		if len(stored) != want {
			t.Errorf("%q: stored in %d bytes, want %d", c.id, len(stored), want)
		}
		rec, err := decodeStored(fuzzLogName, 0, stored)
		if err != nil || rec.Leaf.ID != c.id {
			t.Errorf("%q: decoded %v, %v", c.id, rec, err)
			continue
		}
		var sc scratch
		h, err := sc.leafHash(fuzzLogName, stored)
		if err != nil || h != rec.LeafHash {
			t.Errorf("%q: scan leaf hash %s, %v; want %s", c.id, h, err, rec.LeafHash)
		}
	}
	// Malformed packed ids do not decode.
	for _, b := range [][]byte{
		{sPackedID, 0},                           // no bytes
		{sPackedID, 15<<2 | idLowerUUID, 1, 2},   // a UUID of 15 bytes
		{sPackedID, 16<<2 | idLowerUUID, 1, 2},   // truncated
		{sPackedID, 0x80},                        // truncated header
		{sPackedID, 1<<2 | idUpperHex, 0xab, 1},  // no time
		{sPackedID | sKey, 1<<2 | idLowerHex, 1}, // no key
	} {
		if _, err := decodeStored(fuzzLogName, 0, b); err == nil {
			t.Errorf("%x decoded", b)
		}
		var sc scratch
		if _, err := sc.leafHash(fuzzLogName, b); err == nil {
			t.Errorf("%x: scan decoded", b)
		}
	}
}

// uuidEntry is entry i of the layout tests: a UUID id, as most producers
// send, so that the entry packs.
func uuidEntry(i int) Entry {
	return Entry{ID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i*7919), Payload: []byte(fmt.Sprint("payload ", i))}
}

func appendUUIDs(t *testing.T, l *Log, from, to int) {
	t.Helper()
	for i := from; i < to; {
		var es []Entry
		for ; i < to && len(es) < 4096; i++ {
			es = append(es, uuidEntry(i))
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
}

// A byte flipped in a packed id, or a packed id made malformed, is found
// by a read of the entry and by the scan the scrub runs.
func TestPackedIDTampered(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l := mustCreateLog(t, s, "c")
	appendUUIDs(t, l, 0, 300)
	base := faultBase{cfg: testConfig(t, s), id: l.id, size: 300}
	s.Close()
	for _, c := range []struct {
		name string
		edit func(*pebble.DB) error
		i    uint64
		kind string
	}{
		{"id byte flipped", flipByte(entryKey(base.id, 17), 5), 17, IntegrityLeafMismatch},
		{"id form flipped", flipByte(entryKey(base.id, 18), 1), 18, IntegrityLeafMismatch},
		{"id length broken", setByte(entryKey(base.id, 19), 1, 15<<2|idLowerUUID), 19, IntegrityEntryCorrupt},
	} {
		_, l, _ := base.mustFault(t, c.edit)
		if _, err := l.Entry(c.i); !errors.Is(err, ErrIntegrity) {
			t.Fatalf("%s: Entry(%d) = %v, want an integrity error", c.name, c.i, err)
		} else if ie := (*IntegrityError)(nil); errors.As(err, &ie) && ie.Kind != c.kind {
			t.Fatalf("%s: kind %s, want %s", c.name, ie.Kind, c.kind)
		}
		r, err := l.Raw()
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		err = r.scan(context.Background(), 0, 300, func(es []ScannedEntry) error {
			for _, e := range es {
				tree, err := l.treeLeaf(e.Index)
				if err != nil {
					return err
				}
				if e.Err != nil || e.LeafHash != tree {
					if e.Index != c.i {
						t.Errorf("%s: scan flags entry %d", c.name, e.Index)
					}
					bad++
				}
			}
			return nil
		})
		r.Close()
		if err != nil || bad != 1 {
			t.Fatalf("%s: scan found %d bad entries (%v), want 1", c.name, bad, err)
		}
	}
}

func setByte(k []byte, at int, b byte) func(*pebble.DB) error {
	return func(db *pebble.DB) error {
		v, closer, err := db.Get(k)
		if err != nil {
			return err
		}
		v = append([]byte(nil), v...)
		closer.Close()
		v[at] = b
		return db.Set(k, v, pebble.Sync)
	}
}

// A store of layout 1, as the previous version wrote it (Pebble's oldest
// table format, 4 KiB blocks, the stock Bloom filter on every key,
// entries with their ids as text, one index key per entry and an 8-byte
// chunk record), opens and reads, takes appends that pack, and keeps
// finding and deduplicating the entries in its layout 1 chunk.
func TestLayout1Store(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 2 index chunks of entries")
	}
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	cfg := testConfig(t, s)
	// Pebble's format as layout 1 created it; Open ratchets it.
	s.Close()
	cfg.dir = t.TempDir()
	old := layout1Options()
	old.FormatMajorVersion = pebble.FormatFlushableIngest
	db, err := pebble.Open(cfg.dir, old)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = openTestStore(t, cfg)
	l := mustCreateLog(t, s, "old")
	n := indexChunk + 300
	appendUUIDs(t, l, 0, n)
	id := l.id
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	toLayout1(t, cfg.dir, "old", id, uint64(n))

	s = openTestStore(t, cfg)
	l = mustLog(t, s, "old")
	if got := l.tail.packedFrom.Load(); got != 1 || l.chunks.Load() != 1 {
		t.Fatalf("chunks %d, packed from %d; want 1 chunk in layout 1", l.chunks.Load(), got)
	}
	checkUUIDs(t, l, n)
	// Appends past the next chunk boundary pack it.
	m := 2*indexChunk + 10
	appendUUIDs(t, l, n, m)
	if l.chunks.Load() != 2 {
		t.Fatalf("%d chunks, want 2", l.chunks.Load())
	}
	s = reopen(t, s)
	l = mustLog(t, s, "old")
	if got := l.tail.packedFrom.Load(); got != 1 {
		t.Fatalf("after reopen packed from %d, want 1", got)
	}
	checkUUIDs(t, l, m)
	r, err := l.Raw()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if rec, stored, err := r.indexChunks(); rec != 2 || stored != 2 || err != nil {
		t.Fatalf("IndexChunks = %d, %d, %v; want 2, 2", rec, stored, err)
	}
	// The scanned leaves hash to the log's root (one check of every leaf
	// against the tree: a tile read per entry is slow under -race).
	leaves := merkle.NewRange()
	err = r.scan(context.Background(), 0, uint64(m), func(es []ScannedEntry) error {
		for _, e := range es {
			if e.Err != nil || e.Index != leaves.End() {
				return fmt.Errorf("entry %d (want %d): %v", e.Index, leaves.End(), e.Err)
			}
			if err := leaves.Append(e.LeafHash, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	root, err := leaves.Root()
	if want, werr := l.RootAt(uint64(m)); err != nil || werr != nil || root != want {
		t.Fatalf("root of the %d scanned leaves %v (%v), log root %v (%v)", leaves.End(), root, err, want, werr)
	}
	mixed := map[bool]int{}
	ents, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(l.id, 0), UpperBound: entryKey(l.id+1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	for ents.First(); ents.Valid(); ents.Next() {
		mixed[ents.Value()[0]&sPackedID != 0]++
	}
	err = ents.Close()
	if err != nil || mixed[false] != n || mixed[true] != m-n {
		t.Fatalf("scan: %v; %d layout 1 and %d packed entries, want %d and %d", err, mixed[false], mixed[true], n, m-n)
	}
}

// checkUUIDs checks reads, lookups and deduplication of uuidEntry ids in
// both chunks and the memory index of a log of n of them.
func checkUUIDs(t *testing.T, l *Log, n int) {
	t.Helper()
	ctx := context.Background()
	for _, i := range []int{0, 1, 4242, indexChunk - 1, indexChunk, indexChunk + 299, 2*indexChunk - 1, 2 * indexChunk, n - 1} {
		if i >= n {
			continue
		}
		e := uuidEntry(i)
		rec, err := l.EntryByID(e.ID)
		if err != nil || rec.Index != uint64(i) || !bytes.Equal(rec.Payload, e.Payload) {
			t.Fatalf("EntryByID(%s) = %v, %v", e.ID, rec, err)
		}
		if idx, err := l.IndexByLeafHash(rec.LeafHash); err != nil || idx != uint64(i) {
			t.Fatalf("IndexByLeafHash(leaf %d) = %d, %v", i, idx, err)
		}
		res, err := l.Append(ctx, []Entry{e})
		if err != nil || !res.Entries[0].Duplicate || res.Entries[0].Index != uint64(i) {
			t.Fatalf("re-appending entry %d: %+v, %v", i, res, err)
		}
		e.Payload = []byte("other")
		if _, err := l.Append(ctx, []Entry{e}); !errors.Is(err, ErrConflict) {
			t.Fatalf("conflicting entry %d: %v, want ErrConflict", i, err)
		}
	}
	if _, err := l.EntryByID(uuidEntry(n).ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("EntryByID(absent) = %v, want ErrNotFound", err)
	}
	if l.Size() != uint64(n) {
		t.Fatalf("size %d, want %d", l.Size(), n)
	}
}

// layout1Options are the Pebble options layout 1 opened a store with.
func layout1Options() *pebble.Options {
	po := &pebble.Options{Logger: pebbleLogger{discard}}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return po
}

// toLayout1 rewrites log name (id, size entries) of the closed store in dir
// as layout 1 wrote it, and checks that nothing of layout 2 is left.
func toLayout1(t *testing.T, dir, name string, id uint32, size uint64) {
	t.Helper()
	db, err := pebble.Open(dir, layout1Options())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	chunks := size >> indexChunkBits
	type key struct {
		kind byte
		c    uint32
		h    uint64
	}
	index := map[key][]byte{}
	// One iterator over the entries: a Get per entry is slow under -race.
	ents, err := db.NewIter(&pebble.IterOptions{LowerBound: entryKey(id, 0), UpperBound: entryKey(id, size)})
	if err != nil {
		t.Fatal(err)
	}
	i := uint64(0)
	for ents.First(); ents.Valid(); ents.Next() {
		if !bytes.Equal(ents.Key(), entryKey(id, i)) {
			t.Fatalf("entry key %x, want entry %d", ents.Key(), i)
		}
		v := ents.Value()
		rec, err := decodeStored(name, i, v)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(entryKey(id, i), layout1Stored(t, v), nil)
		if c := i >> indexChunkBits; c < chunks {
			for _, k := range []key{{kindIDIndex, uint32(c), idHash(rec.Leaf.ID)}, {kindHashIndex, uint32(c), leafHashKey(rec.LeafHash)}} {
				index[k] = binary.AppendUvarint(index[k], i)
			}
		}
		i++
	}
	if err := ents.Close(); err != nil || i != size {
		t.Fatalf("read %d entries of %d: %v", i, size, err)
	}
	for _, kind := range []byte{kindIDIndex, kindHashIndex} {
		_ = b.DeleteRange(logKey(kind, id, 0), logKey(kind, id+1, 0), nil)
	}
	for k, v := range index {
		_ = b.Set(chunkKey(k.kind, id, k.c, k.h), v, nil)
	}
	_ = b.Set(chunksKey(id), binary.BigEndian.AppendUint64(nil, chunks), nil)
	_ = b.Delete([]byte{kindLayout}, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	// Every table rewritten as layout 1 wrote it.
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		switch {
		case k[0] == kindEntry && it.Value()[0]&sPackedID != 0,
			(k[0] == kindIDIndex || k[0] == kindHashIndex) && len(k) != 17,
			k[0] == kindLayout:
			t.Fatalf("layout 2 key %x left", k)
		}
	}
	tables, err := db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range tables {
		for _, tb := range level {
			if p := tb.Properties.FilterPolicyName; p != bloom.FilterPolicy(10).Name() {
				t.Fatalf("table %s has filter %q", tb.FileNum, p)
			}
		}
	}
}

// layout1Stored re-encodes a stored entry with its id as text.
func layout1Stored(t *testing.T, v []byte) []byte {
	t.Helper()
	if v[0]&sPackedID == 0 {
		return append([]byte(nil), v...)
	}
	id, rest, ok := unpackID(nil, v[1:])
	if !ok {
		t.Fatal("packed id does not decode")
	}
	out := []byte{v[0] &^ sPackedID}
	out = binary.AppendUvarint(out, uint64(len(id)))
	return append(append(out, id...), rest...)
}

// A packed index bucket that does not decode fails the lookups that read
// it, and an append of an id filed there is refused, not appended again;
// the store still opens.
func TestPackedBucketMalformed(t *testing.T) {
	if testing.Short() {
		t.Skip("appends an index chunk of entries")
	}
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l := mustCreateLog(t, s, "c")
	n := indexChunk + 10
	appendUUIDs(t, l, 0, n)
	base := faultBase{cfg: testConfig(t, s), id: l.id, size: uint64(n)}
	s.Close()
	e := uuidEntry(5)
	bucket := byte(idHash(e.ID) >> 56)
	_, l, _ = base.mustFault(t, setKey(packedKey(kindIDIndex, base.id, 0, bucket), []byte{1, 2, 3, 4, 5}))
	if _, err := l.EntryByID(e.ID); err == nil || errors.Is(err, ErrNotFound) || !errors.Is(err, errPacked) {
		t.Fatalf("EntryByID through a malformed bucket = %v, want errPacked", err)
	}
	if _, err := l.Append(context.Background(), []Entry{e}); err == nil {
		t.Fatal("a retry of an entry filed in a malformed bucket was appended")
	}
	if l.Size() != uint64(n) {
		t.Fatalf("size %d, want %d", l.Size(), n)
	}
	// Other buckets answer.
	for i := 6; i < 40; i++ {
		if o := uuidEntry(i); byte(idHash(o.ID)>>56) != bucket {
			if rec, err := l.EntryByID(o.ID); err != nil || rec.Index != uint64(i) {
				t.Fatalf("EntryByID(entry %d) = %v, %v", i, rec, err)
			}
		}
	}
}

// A store whose layout marker is newer than this version's is refused at
// open, not read with the wrong decoding.
func TestNewerLayoutRefused(t *testing.T) {
	t.Parallel()
	skey, vkey, err := note.GenerateKey(rand.Reader, testKeyName)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	dir := t.TempDir()
	s, err := Open(dir, signer, verifier, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(dir, pebbleOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte{kindLayout}, binary.BigEndian.AppendUint32(nil, storageLayout+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, signer, verifier, WithLogger(slog.New(slog.DiscardHandler)))
	if err == nil {
		s.Close()
		t.Fatal("a store of a newer storage layout opened")
	}
	if want := fmt.Sprintf("storage layout %d is newer", storageLayout+1); !strings.Contains(err.Error(), want) {
		t.Fatalf("open: %v, want it to say %q", err, want)
	}
}

// TestFilterV1TablesStillRead: tables written with the ledger filter as
// storage layout 2 first built it (packed index keys left out of the
// filter) must still answer for those keys once the store is opened with
// the current filter, which holds them: a lookup that trusted an old
// filter to hold them would miss every id of an ingested chunk, and an
// append of one would be taken as new.
func TestFilterV1TablesStillRead(t *testing.T) {
	if testing.Short() {
		t.Skip("appends an index chunk of entries")
	}
	t.Parallel()
	v1 := func(po *pebble.Options) {
		stock := bloom.FilterPolicy(bloomBits)
		for i := range po.Levels {
			po.Levels[i].FilterPolicy = ledgerFilterV1{stock}
		}
	}
	s, _ := newTestStore(t, WithCheckpointInterval(0), func(o *options) { o.tune = v1 })
	l := mustCreateLog(t, s, "v1")
	n := indexChunk + 300
	appendUUIDs(t, l, 0, n)
	if l.chunks.Load() != 1 {
		t.Fatalf("%d chunks ingested, want 1", l.chunks.Load())
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, s)
	s.Close()
	// The same directory with the current filter.
	cfg.opts = append(cfg.opts, func(o *options) { o.tune = nil })
	s = openTestStore(t, cfg)
	l = mustLog(t, s, "v1")
	checkUUIDs(t, l, n)
	// The chunk's tables are still the v1 filter's.
	found := false
	tables, err := s.db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tables {
		for _, ti := range p {
			if ti.Properties.FilterPolicyName == (ledgerFilterV1{}).Name() {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("no table with the v1 filter left: the test checks nothing")
	}
}

package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// This file gives the checkers (package checkers, auditd fsck) raw access to
// what the store holds, without the checks and caches the serving path
// relies on: stored entries with leaf hashes recomputed from their bytes,
// stored tiles as they are (base and level-4 hashes), and stored checkpoint
// notes unparsed. Nothing here fails as a whole because one stored value is
// bad; each bad value is handed to the caller to report.

// RawStore is a store opened for checking only: Pebble is opened read-only
// (no write, no compaction; a WAL is replayed into memory and not
// persisted), no log is loaded or checked, no writer runs and no checkpoint
// is signed. A store that Open refuses still opens. It holds Pebble's
// directory lock, so it fails while a daemon runs on the directory.
type RawStore struct {
	db  *pebble.DB
	dir string
}

// OpenRaw opens the store in dir read-only for checking. It fails if dir
// holds no store. Only WithLogger and WithCacheSize apply.
func OpenRaw(dir string, opts ...Option) (*RawStore, error) {
	o := options{cacheBytes: 128 << 20, logger: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	cache := pebble.NewCache(o.cacheBytes)
	defer cache.Unref()
	po := pebbleOptions()
	// Read-only: the store keeps the format it has.
	po.FormatMajorVersion = pebble.FormatDefault
	po.Cache, po.ReadOnly, po.ErrorIfNotExists, po.Logger = cache, true, true, pebbleLogger{o.logger}
	po.EnsureDefaults()
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s read-only: %w", dir, err)
	}
	return &RawStore{db: db, dir: dir}, nil
}

// Close closes the store.
func (s *RawStore) Close() error { return s.db.Close() }

// Logs returns the names of the logs the store records (name keys), in
// name order.
func (s *RawStore) Logs() ([]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindName}, UpperBound: []byte{kindName + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var names []string
	for it.First(); it.Valid(); it.Next() {
		names = append(names, string(it.Key()[1:]))
	}
	sort.Strings(names)
	return names, it.Error()
}

// Log returns raw access to the named log, or ErrLogNotFound. The caller
// closes it.
func (s *RawStore) Log(name string) (*RawLog, error) {
	return openRawLog(s.db, nil, name)
}

// Raw returns raw access to the log over a consistent snapshot of the
// store, for checking a live log: the snapshot's size and root, entries,
// tiles and checkpoints all belong to one moment. The caller closes it.
func (l *Log) Raw() (*RawLog, error) {
	snap := l.s.db.NewSnapshot()
	r, err := openRawLog(snap, snap, l.name)
	if err != nil {
		snap.Close()
		return nil, err
	}
	return r, nil
}

// RawLog reads one log's stored data as it is.
type RawLog struct {
	r    pebble.Reader
	snap *pebble.Snapshot // closed with the log, if any
	name string
	id   uint32
	size uint64
	root merkle.Hash

	tiles tileMemo
}

// tileMemoSize is how many level-0 tiles a RawLog remembers: more than a
// scan batch spans (scanBatchSize entries, plus the tile a batch not
// aligned to tiles starts in).
const tileMemoSize = 2 * scanBatchSize / tileWidth

// tileMemo holds the level-0 tiles a RawLog decoded last, slot n mod
// tileMemoSize for tile n. A pass of Check reads each level-0 tile twice:
// the storage checks read it while a batch is checked, before the batch
// goes to fn, and the scrub behind fn reads it again to compare the
// leaves; the second read is served from here, neither a second Pebble get
// nor a second decode. The store behind a RawLog does not change while it
// is open (a snapshot, or a store opened read-only), so a remembered tile
// is what a read would return. Callers only read the slices.
type tileMemo struct {
	mu   sync.Mutex
	slot [tileMemoSize]struct {
		n         uint64
		ok        bool
		base, mid []merkle.Hash
	}
}

func (m *tileMemo) get(n uint64) (base, mid []merkle.Hash, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &m.slot[n%tileMemoSize]
	if !s.ok || s.n != n {
		return nil, nil, false
	}
	return s.base, s.mid, true
}

func (m *tileMemo) put(n uint64, base, mid []merkle.Hash) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &m.slot[n%tileMemoSize]
	s.n, s.ok, s.base, s.mid = n, true, base, mid
}

func openRawLog(r pebble.Reader, snap *pebble.Snapshot, name string) (*RawLog, error) {
	v, closer, err := r.Get(nameKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrLogNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: read name: %w", name, err)
	}
	if len(v) != 4 {
		closer.Close()
		return nil, fmt.Errorf("ledger: %s: name key holds %d bytes, want a 4-byte log id", name, len(v))
	}
	id := binary.BigEndian.Uint32(v)
	closer.Close()
	v, closer, err = r.Get(metaKey(id))
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: read metadata: %w", name, err)
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: metadata: %w", name, err)
	}
	if m.name != name {
		return nil, fmt.Errorf("ledger: %s: metadata names the log %q", name, m.name)
	}
	return &RawLog{r: r, snap: snap, name: name, id: id, size: m.size, root: m.root}, nil
}

// Close releases the log's snapshot, if it has one.
func (r *RawLog) Close() error {
	if r.snap != nil {
		return r.snap.Close()
	}
	return nil
}

// Name returns the log's name.
func (r *RawLog) Name() string { return r.name }

// Size returns the tree size the log's metadata records.
func (r *RawLog) Size() uint64 { return r.size }

// Root returns the root the log's metadata records for Size.
func (r *RawLog) Root() merkle.Hash { return r.root }

// HashReader reads tree hashes from the stored tiles, as proofs do.
func (r *RawLog) HashReader() merkle.HashReader { return hashReader{db: r.r, log: r.id} }

// Tile returns the stored tile at tile level level and index n: its base
// hashes (tree level 8*level) and the level-4 hashes stored after them. A
// tile not in storage is ErrNotFound; one whose value has an impossible
// length is another error. The level-0 tiles read last are remembered
// (tileMemo): the slices returned must not be modified.
func (r *RawLog) Tile(level uint8, n uint64) (base, mid []merkle.Hash, err error) {
	if level == 0 {
		if base, mid, ok := r.tiles.get(n); ok {
			return base, mid, nil
		}
	}
	v, closer, err := r.r.Get(tileKey(r.id, level, n))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: tile %d/%d of %s", ErrNotFound, level, n, r.name)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: %s: read tile %d/%d: %w", r.name, level, n, err)
	}
	defer closer.Close()
	if base, mid, err = decodeTile(v); err == nil && level == 0 {
		r.tiles.put(n, base, mid)
	}
	return base, mid, err
}

// RawCheckpoint is a stored checkpoint note and the size its key files it
// under, not parsed or verified.
type RawCheckpoint struct {
	Size uint64
	Note []byte
}

// Checkpoints returns every stored checkpoint note, by size.
func (r *RawLog) Checkpoints() ([]RawCheckpoint, error) {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: checkpointKey(r.id, 0), UpperBound: logKey(kindCheckpoint, r.id+1, 0)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []RawCheckpoint
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 13 {
			continue // not a checkpoint key of this layout
		}
		out = append(out, RawCheckpoint{Size: binary.BigEndian.Uint64(k[5:]), Note: bytes.Clone(it.Value())})
	}
	return out, it.Error()
}

// indexChunks returns the number of id and leaf-hash index chunks the log
// records as ingested, and the number present in storage (one more than the
// highest chunk that has a key). Each chunk covers 65,536 entries, so
// either count beyond Size()/65,536 means the store lost entries it had
// indexed.
func (r *RawLog) indexChunks() (recorded, stored uint64, err error) {
	v, closer, err := r.r.Get(chunksKey(r.id))
	switch {
	case err == nil:
		recorded, _, _ = decodeChunks(v) // a malformed record counts none
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		return 0, 0, err
	}
	for _, kind := range []byte{kindIDIndex, kindHashIndex} {
		it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: logKey(kind, r.id, 0), UpperBound: logKey(kind, r.id+1, 0)})
		if err != nil {
			return 0, 0, err
		}
		if it.Last() {
			if k := it.Key(); len(k) == 17 || len(k) == packedKeyLen { // layout 1, packed
				stored = max(stored, uint64(binary.BigEndian.Uint32(k[5:]))+1)
			}
		}
		if err := it.Close(); err != nil {
			return 0, 0, err
		}
	}
	return recorded, stored, nil
}

// entryAbove returns the index of the first entry stored at or above size,
// if any: the tree recorded does not cover it.
func (r *RawLog) entryAbove(size uint64) (index uint64, found bool, err error) {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: entryKey(r.id, size), UpperBound: logKey(kindEntry, r.id+1, 0)})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if k := it.Key(); len(k) == 13 {
			return binary.BigEndian.Uint64(k[5:]), true, nil
		}
	}
	return 0, false, it.Error()
}

// ScannedEntry is one stored entry as Check (or scan) read it.
type ScannedEntry struct {
	Index uint64
	// LeafHash is recomputed from the stored entry: its payload hashed
	// again, its leaf encoded and hashed. Zero when Err is set.
	LeafHash merkle.Hash
	// Err is an IntegrityError of kind IntegrityEntryMissing or
	// IntegrityEntryCorrupt.
	Err *IntegrityError

	// idKey is the id index key of the stored entry's id (the first 8
	// bytes of its SHA-256, big-endian), for chunkKeys.setID; pruned says
	// the stored entry holds only its payload's hash and is not an
	// oversize record (merkle.MarkOversize): its payload was pruned. Both
	// are zero when Err is set.
	idKey  uint64
	pruned bool
}

// A batch handed to Scan's callback holds scanBatchSize entries, or fewer
// once their stored bytes reach scanBatchBytes: with 4 batches in flight a
// scan of large payloads holds about 4 x scanBatchBytes (plus one entry
// each), never 4 x 4,096 payloads.
const (
	scanBatchSize  = 4096
	scanBatchBytes = 1 << 20
)

// scan reads the stored entries [from, to) in one pass of one iterator and
// calls fn with them in index order, in batches. The payload and leaf
// hashes are recomputed on GOMAXPROCS goroutines while the next batch is
// read. A missing or undecodable entry is reported in its slot and the scan
// goes on. fn must not keep the slice after it returns; an error from fn
// or the end of ctx stops the scan.
func (r *RawLog) scan(ctx context.Context, from, to uint64, fn func([]ScannedEntry) error) error {
	if from >= to {
		return nil
	}
	workers := runtime.GOMAXPROCS(0)
	type part struct {
		b      *scanBatch
		lo, hi int
	}
	const inFlight = 4
	free := make(chan *scanBatch, inFlight)
	for range inFlight {
		free <- &scanBatch{}
	}
	ready := make(chan *scanBatch, inFlight)
	work := make(chan part, inFlight*workers)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc scratch
			for p := range work {
				for i := p.lo; i < p.hi; i++ {
					p.b.hash(r.name, i, &sc)
				}
				p.b.wg.Done()
			}
		}()
	}
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ready)
		defer close(work)
		readErr = r.read(ctx, from, to, free, done, func(b *scanBatch) bool {
			n := len(b.ents)
			per := (n + workers - 1) / workers
			for lo := 0; lo < n; lo += per {
				b.wg.Add(1)
				work <- part{b, lo, min(lo+per, n)}
			}
			select {
			case ready <- b:
				return true
			case <-done:
				return false
			}
		})
	}()
	var err error
	for b := range ready {
		b.wg.Wait()
		if err == nil {
			err = fn(b.ents)
			if err != nil {
				close(done)
			}
		}
		free <- b
	}
	if err == nil {
		close(done)
	}
	wg.Wait()
	if err != nil {
		return err
	}
	return readErr
}

// read fills batches from one iterator and passes each to send.
func (r *RawLog) read(ctx context.Context, from, to uint64, free <-chan *scanBatch, done <-chan struct{}, send func(*scanBatch) bool) error {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: entryKey(r.id, from), UpperBound: entryKey(r.id, to)})
	if err != nil {
		return err
	}
	defer it.Close()
	var b *scanBatch
	get := func() bool {
		select {
		case b = <-free:
			b.reset()
			return true
		case <-done:
			return false
		}
	}
	flush := func() bool {
		if err := ctx.Err(); err != nil {
			return false
		}
		ok := send(b)
		b = nil
		return ok
	}
	if !get() {
		return nil
	}
	want := from
	add := func(idx uint64, v []byte, present bool) bool {
		b.add(idx, v, present)
		if len(b.ents) == scanBatchSize || len(b.vals) >= scanBatchBytes {
			return flush() && get()
		}
		return true
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 13 {
			continue // not an entry key of this layout; the gap is reported
		}
		idx := binary.BigEndian.Uint64(k[5:])
		for ; want < idx; want++ {
			if !add(want, nil, false) {
				return ctx.Err()
			}
		}
		if !add(idx, it.Value(), true) {
			return ctx.Err()
		}
		want = idx + 1
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("ledger: %s: scan entries: %w", r.name, err)
	}
	for ; want < to; want++ {
		if !add(want, nil, false) {
			return ctx.Err()
		}
	}
	if len(b.ents) > 0 && !flush() {
		return ctx.Err()
	}
	return nil
}

// scanBatch is one batch of Scan: the stored values copied out of the
// iterator, then hashed in place.
type scanBatch struct {
	ents []ScannedEntry
	vals []byte
	offs []int // start of entry i's value in vals; -1 if missing
	wg   sync.WaitGroup
}

func (b *scanBatch) reset() {
	b.ents, b.vals, b.offs = b.ents[:0], b.vals[:0], b.offs[:0]
}

func (b *scanBatch) add(idx uint64, v []byte, present bool) {
	b.ents = append(b.ents, ScannedEntry{Index: idx})
	if !present {
		b.offs = append(b.offs, -1)
		return
	}
	b.offs = append(b.offs, len(b.vals))
	b.vals = append(b.vals, v...)
}

func (b *scanBatch) value(i int) ([]byte, bool) {
	start := b.offs[i]
	if start < 0 {
		return nil, false
	}
	end := len(b.vals)
	for j := i + 1; j < len(b.offs); j++ {
		if b.offs[j] >= 0 {
			end = b.offs[j]
			break
		}
	}
	return b.vals[start:end], true
}

func (b *scanBatch) hash(log string, i int, sc *scratch) {
	e := &b.ents[i]
	v, ok := b.value(i)
	if !ok {
		e.Err = &IntegrityError{Log: log, Index: int64(e.Index), Kind: IntegrityEntryMissing, Detail: "entry missing from storage"}
		return
	}
	h, err := sc.leafHash(log, v)
	if err != nil {
		e.Err = &IntegrityError{Log: log, Index: int64(e.Index), Kind: IntegrityEntryCorrupt, Detail: err.Error()}
		return
	}
	e.LeafHash = h
	id := sha256.Sum256(sc.entry.id)
	e.idKey = binary.BigEndian.Uint64(id[:8])
	e.pruned = sc.entry.flags&sPruned != 0 && sc.entry.marks&merkle.MarkOversize == 0
}

// scratch is one scan worker's reusable decoding state.
type scratch struct {
	entry   storedEntry
	fields  merkle.Leaf // the entry's leaf, but for its id (e.id)
	source  merkle.Source
	headers []merkle.Header
	buf     []byte
	id      []byte // a packed id's text
}

// leafHash decodes a stored entry (storedEntry.decode, without copying its
// payload) and returns its recomputed leaf hash; sc.entry holds the
// decoded entry until the next call.
func (sc *scratch) leafHash(log string, b []byte) (merkle.Hash, error) {
	_, h, err := sc.leaf(log, b)
	return h, err
}

// leaf decodes the stored entry b of log without copying it and returns
// its leaf's encoding (valid until the next call) and RFC 6962 leaf hash;
// sc.entry holds the decoded entry, aliasing b, until the next call.
func (sc *scratch) leaf(log string, b []byte) ([]byte, merkle.Hash, error) {
	e := &sc.entry
	var err error
	if sc.id, err = e.decode(b, sc.id); err != nil {
		return nil, merkle.Hash{}, err
	}
	l := &sc.fields
	*l = merkle.Leaf{Log: log, HasKey: e.flags&sKey != 0, Key: e.key, // the id is e.id: AppendID below
		Time: e.time, TimeAssigned: e.flags&sTimeAssigned != 0, Marks: e.marks}
	if e.flags&sSource != 0 {
		sc.source = merkle.Source{Topic: string(e.topic), Partition: e.partition, Offset: e.offset}
		l.Source = &sc.source
	}
	if e.nHeaders > 0 {
		sc.headers = sc.headers[:0]
		e.eachHeader(func(k, v []byte) {
			sc.headers = append(sc.headers, merkle.Header{Key: string(k), Value: v})
		})
		l.Headers = sc.headers
	}
	if e.flags&sPruned != 0 {
		copy(l.PayloadSHA256[:], e.payload)
	} else {
		l.PayloadSHA256 = sha256.Sum256(e.payload)
	}
	// RFC 6962: SHA-256(0x00 || leaf).
	buf, err := l.AppendID(append(sc.buf[:0], 0), e.id)
	sc.buf = buf
	if err != nil {
		return nil, merkle.Hash{}, err
	}
	return buf[1:], sha256.Sum256(buf), nil
}

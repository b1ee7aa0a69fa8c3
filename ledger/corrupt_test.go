package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/merkle"
)

// The tests of this file damage a store behind the ledger's back: the store
// is closed, its directory copied, the copy opened with Pebble directly and
// one key edited, then the copy opened again with Open. Each fault gets its
// own copy.

// integrityLog records what the integrity handler was told.
type integrityLog struct {
	mu   sync.Mutex
	seen []IntegrityError
}

func (r *integrityLog) handle(e *IntegrityError) {
	r.mu.Lock()
	r.seen = append(r.seen, *e)
	r.mu.Unlock()
}

func (r *integrityLog) all() []IntegrityError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]IntegrityError(nil), r.seen...)
}

// has reports whether the handler was told of kind at index.
func (r *integrityLog) has(kind string, index int64) bool {
	for _, e := range r.all() {
		if e.Kind == kind && e.Index == index {
			return true
		}
	}
	return false
}

// faultBase is a closed store to copy: its config, the id of log "c" and its
// size.
type faultBase struct {
	cfg  testStoreConfig
	id   uint32
	size uint64
}

// corruptEntryID is the event id of entry i of a fault base.
func corruptEntryID(i int) string { return fmt.Sprintf("ev-%06d", i) }

// corruptEntry is entry i of a fault base.
func corruptEntry(i int) Entry {
	return Entry{ID: corruptEntryID(i), HasKey: true, Key: []byte{byte(i)}, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), PayloadJSON: true}
}

// newFaultBase builds log "c" of n entries (appended in requests of per)
// and closes the store.
func newFaultBase(t *testing.T, n, per int) faultBase {
	t.Helper()
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "c")
	for i := 0; i < n; i += per {
		es := make([]Entry, 0, per)
		for j := i; j < min(n, i+per); j++ {
			es = append(es, corruptEntry(j))
		}
		mustAppend(t, l, es...)
	}
	if _, err := l.WaitCheckpoint(testCtx(t, 30e9), uint64(n)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return faultBase{cfg: cfg, id: l.id, size: uint64(n)}
}

// withFault copies the base, applies edit to the copy through Pebble and
// opens the copy with an integrity handler. It returns the store (nil if
// Open failed), Open's error and the handler's record.
func (b faultBase) withFault(t *testing.T, edit func(db *pebble.DB) error) (*Store, error, *integrityLog) {
	t.Helper()
	dir := editedCopy(t, b.cfg.dir, func(db *pebble.DB) {
		if edit == nil {
			return
		}
		if err := edit(db); err != nil {
			t.Fatalf("edit copy: %v", err)
		}
	})
	rec := &integrityLog{}
	cfg := b.cfg
	cfg.dir = dir
	cfg.opts = append(append([]Option(nil), b.cfg.opts...), WithIntegrityHandler(rec.handle))
	s, err := Open(cfg.dir, cfg.signer, cfg.verifier, cfg.opts...)
	if err != nil {
		return nil, err, rec
	}
	t.Cleanup(func() { s.Close() })
	return s, nil, rec
}

// editedCopy copies the store directory from into a temporary directory,
// opens the copy with Pebble alone, lets edit change it and closes it. It
// returns the copy's directory.
func editedCopy(t *testing.T, from string, edit func(db *pebble.DB)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "copy")
	copyDir(t, from, dir)
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{discard}})
	if err != nil {
		t.Fatalf("pebble open copy: %v", err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mustFault is withFault for a fault the store must open with.
func (b faultBase) mustFault(t *testing.T, edit func(db *pebble.DB) error) (*Store, *Log, *integrityLog) {
	t.Helper()
	s, err, rec := b.withFault(t, edit)
	if err != nil {
		t.Fatalf("open the damaged copy: %v", err)
	}
	return s, mustLog(t, s, "c"), rec
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", from, err)
	}
}

var discard = slog.New(slog.DiscardHandler)

// edits

func deleteKey(k []byte) func(*pebble.DB) error {
	return func(db *pebble.DB) error { return db.Delete(k, pebble.Sync) }
}

func setKey(k, v []byte) func(*pebble.DB) error {
	return func(db *pebble.DB) error { return db.Set(k, v, pebble.Sync) }
}

// flipByte flips one bit of byte at of k's value (at < 0 counts from the
// end).
func flipByte(k []byte, at int) func(*pebble.DB) error {
	return func(db *pebble.DB) error {
		v, closer, err := db.Get(k)
		if err != nil {
			return err
		}
		v = append([]byte(nil), v...)
		closer.Close()
		if at < 0 {
			at += len(v)
		}
		v[at] ^= 0x01
		return db.Set(k, v, pebble.Sync)
	}
}

// wantIntegrity requires err to be an *IntegrityError of kind at index.
func wantIntegrity(t *testing.T, what string, err error, kind string, index int64) {
	t.Helper()
	var ie *IntegrityError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIntegrity) {
		t.Fatalf("%s: error %v, want an integrity error %s at %d", what, err, kind, index)
	}
	if ie.Kind != kind || ie.Index != index || ie.Log != "c" {
		t.Fatalf("%s: integrity error %+v, want kind %s, log c, index %d", what, ie, kind, index)
	}
}

func violations(s *Store, kind string) float64 {
	var m dto.Metric
	if err := s.metrics.violations.WithLabelValues("c", kind).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestIntegrityEntryMissingInIndexedChunk is the regression of issue 8,
// defect 3: an entry deleted from a chunk whose id index is already
// ingested was found by no one, and every read of it, by index or id, and a
// producer's retry of it failed with a plain error forever. Each must now be
// an integrity error, counted and handed to the handler, while the other
// entries read fine.
func TestIntegrityEntryMissingInIndexedChunk(t *testing.T) {
	t.Parallel()
	n := indexChunk + 300
	base := newFaultBase(t, n, 4096)
	const lost = 1000
	t.Run("entry deleted", func(t *testing.T) {
		s, l, rec := base.mustFault(t, deleteKey(entryKey(base.id, lost)))
		if l.chunks.Load() != 1 {
			t.Fatalf("%d index chunks ingested, want 1", l.chunks.Load())
		}
		if len(rec.all()) != 0 {
			t.Fatalf("open reported %v; the cheap open check does not look at entry %d", rec.all(), lost)
		}
		_, err := l.Entry(lost)
		wantIntegrity(t, "Entry", err, IntegrityEntryMissing, lost)
		_, err = l.EntryByID(corruptEntryID(lost))
		wantIntegrity(t, "EntryByID", err, IntegrityEntryMissing, lost)
		_, err = l.Append(testCtx(t, 30e9), []Entry{corruptEntry(lost)})
		wantIntegrity(t, "a retry of the event", err, IntegrityEntryMissing, lost)
		err = l.Entries(context.Background(), lost-10, lost+10, func(*Record) error { return nil })
		wantIntegrity(t, "Entries", err, IntegrityEntryMissing, lost)
		err = l.ScanEntries(context.Background(), lost-10, lost+10, func(*Record) error { return nil })
		wantIntegrity(t, "ScanEntries", err, IntegrityEntryMissing, lost)
		// A scan that ends at the hole still sees it.
		err = l.Entries(context.Background(), lost-10, lost+1, func(*Record) error { return nil })
		wantIntegrity(t, "Entries ending at the hole", err, IntegrityEntryMissing, lost)
		if got := violations(s, IntegrityEntryMissing); got != 6 {
			t.Errorf("violations{kind=entry_missing} = %v, want 6", got)
		}
		if got := len(rec.all()); got != 6 {
			t.Errorf("the handler was told %d times, want 6: %v", got, rec.all())
		}
		if l.Size() != uint64(n) {
			t.Errorf("the retry changed the size to %d", l.Size())
		}
		// The rest reads fine, and a retry of another old event is a
		// duplicate.
		for _, i := range []uint64{0, lost - 1, lost + 1, indexChunk - 1, indexChunk, uint64(n - 1)} {
			if r, err := l.Entry(i); err != nil || r.Leaf.ID != corruptEntryID(int(i)) {
				t.Errorf("Entry(%d): %v, %v", i, r, err)
			}
			if _, err := l.EntryByID(corruptEntryID(int(i))); err != nil {
				t.Errorf("EntryByID(%d): %v", i, err)
			}
		}
		res, err := l.Append(testCtx(t, 30e9), []Entry{corruptEntry(lost + 1)})
		if err != nil || !res.Entries[0].Duplicate || res.Entries[0].Index != lost+1 {
			t.Errorf("retry of entry %d: %+v, %v", lost+1, res, err)
		}
		if err := l.Entries(context.Background(), lost+1, uint64(n), func(*Record) error { return nil }); err != nil {
			t.Errorf("Entries after the hole: %v", err)
		}
	})

	t.Run("id flipped", func(t *testing.T) {
		// An altered id must not turn a retry into a new entry: the
		// ingested id index still points at the entry, which fails.
		const i = 700
		_, l, _ := base.mustFault(t, flipByte(entryKey(base.id, i), 2))
		_, err := l.Append(testCtx(t, 30e9), []Entry{corruptEntry(i)})
		wantIntegrity(t, "a retry of the event", err, IntegrityLeafMismatch, i)
		_, err = l.EntryByID(corruptEntryID(i))
		wantIntegrity(t, "EntryByID", err, IntegrityLeafMismatch, i)
		if l.Size() != uint64(n) {
			t.Errorf("size %d after the retry, want %d", l.Size(), n)
		}
	})

	t.Run("last entry of a chunk deleted", func(t *testing.T) {
		// The cheap open check: reported at open, the log still opens.
		const i = indexChunk - 1
		s, l, rec := base.mustFault(t, deleteKey(entryKey(base.id, i)))
		if !rec.has(IntegrityEntryMissing, i) || violations(s, IntegrityEntryMissing) != 1 {
			t.Fatalf("open reported %v, want entry_missing at %d", rec.all(), i)
		}
		_, err := l.EntryByID(corruptEntryID(i))
		wantIntegrity(t, "EntryByID", err, IntegrityEntryMissing, i)
		if _, err := l.Entry(i - 1); err != nil {
			t.Errorf("Entry(%d): %v", i-1, err)
		}
	})
}

// TestIntegrityOpenTail covers the entries above the last ingested chunk,
// from which open rebuilds the memory index: a damaged one is reported at
// open, and the log opens and answers the integrity error for that entry
// only.
func TestIntegrityOpenTail(t *testing.T) {
	t.Parallel()
	const n, tail = 1100, 700
	base := newFaultBase(t, n, 300)
	for _, c := range []struct {
		name string
		edit func(*pebble.DB) error
		kind string
		// retry: a retry of the event is refused with the error (the id is
		// still indexed), or else appended again (no id to index).
		retry bool
	}{
		{"entry missing", deleteKey(entryKey(base.id, tail)), IntegrityEntryMissing, false},
		{"payload flipped", flipByte(entryKey(base.id, tail), -2), IntegrityLeafMismatch, true},
		{"id flipped", flipByte(entryKey(base.id, tail), 2), IntegrityLeafMismatch, false},
		{"entry undecodable", setKey(entryKey(base.id, tail), []byte{0xff}), IntegrityEntryCorrupt, false},
		{"tile hash flipped", flipByte(tileKey(base.id, 0, tail/tileWidth), tail%tileWidth*merkle.HashSize), IntegrityLeafMismatch, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, l, rec := base.mustFault(t, c.edit)
			if !rec.has(c.kind, tail) || violations(s, c.kind) != 1 {
				t.Fatalf("open reported %v (violations %v), want one %s at %d", rec.all(), violations(s, c.kind), c.kind, tail)
			}
			_, err := l.Entry(tail)
			wantIntegrity(t, "Entry", err, c.kind, tail)
			for _, i := range []uint64{0, tail - 1, tail + 1, n - 1} {
				if _, err := l.Entry(i); err != nil {
					t.Errorf("Entry(%d): %v", i, err)
				}
				if _, err := l.EntryByID(corruptEntryID(int(i))); err != nil {
					t.Errorf("EntryByID(%d): %v", i, err)
				}
			}
			// The leaf-hash index holds the tree's hash of the entry.
			if i, err := l.IndexByLeafHash(mustLeafHash(t, l, tail)); err != nil || i != tail {
				t.Errorf("IndexByLeafHash: %d, %v", i, err)
			}
			res, err := l.Append(testCtx(t, 30e9), []Entry{corruptEntry(tail)})
			if c.retry {
				wantIntegrity(t, "a retry of the event", err, c.kind, tail)
			} else if err != nil || res.Entries[0].Index != n {
				t.Errorf("a retry of the event: %+v, %v; want it appended again", res, err)
			}
		})
	}
}

// TestIntegrityStoredData is the regression of issue 8, defect 4: stored
// payloads and tile hashes were never checked against the tree, so a
// flipped payload byte was served with a recomputed leaf hash that differs
// from the tree's, and a flipped tile hash gave wrong proofs.
func TestIntegrityStoredData(t *testing.T) {
	t.Parallel()
	const n = 1100 // tiles 0/0..0/3 full, 0/4 partial
	base := newFaultBase(t, n, 300)
	scan := func(l *Log, from, to uint64) error {
		return l.Entries(context.Background(), from, to, func(*Record) error { return nil })
	}

	t.Run("payload flipped", func(t *testing.T) {
		const i = 300
		s, l, rec := base.mustFault(t, flipByte(entryKey(base.id, i), -2))
		_, err := l.Entry(i)
		wantIntegrity(t, "Entry", err, IntegrityLeafMismatch, i)
		_, err = l.EntryByID(corruptEntryID(i))
		wantIntegrity(t, "EntryByID", err, IntegrityLeafMismatch, i)
		wantIntegrity(t, "Entries", scan(l, 256, 512), IntegrityLeafMismatch, i)
		_, err = l.Append(testCtx(t, 30e9), []Entry{corruptEntry(i)})
		wantIntegrity(t, "a retry of the event", err, IntegrityLeafMismatch, i)
		// One more from the open, which rebuilt the memory index.
		if !rec.has(IntegrityLeafMismatch, i) || violations(s, IntegrityLeafMismatch) != 5 {
			t.Errorf("handler %v, violations %v; want 5 leaf mismatches at %d", rec.all(), violations(s, IntegrityLeafMismatch), i)
		}
		// ScanEntries does not recompute leaves (the scrub covers it): it
		// gives the tree's leaf hash.
		err = l.ScanEntries(context.Background(), i, i+1, func(r *Record) error {
			if r.LeafHash != mustLeafHash(t, l, i) {
				t.Errorf("ScanEntries leaf hash %s is not the tree's", r.LeafHash)
			}
			return nil
		})
		if err != nil {
			t.Errorf("ScanEntries: %v", err)
		}
		if err := scan(l, 0, i); err != nil {
			t.Errorf("Entries below the flipped entry: %v", err)
		}
	})

	t.Run("entry undecodable", func(t *testing.T) {
		const i = 5
		_, l, _ := base.mustFault(t, setKey(entryKey(base.id, i), []byte{0x80, 1, 'x'}))
		_, err := l.Entry(i)
		wantIntegrity(t, "Entry", err, IntegrityEntryCorrupt, i)
		wantIntegrity(t, "Entries", scan(l, 0, 10), IntegrityEntryCorrupt, i)
		err = l.ScanEntries(context.Background(), 0, 10, func(*Record) error { return nil })
		wantIntegrity(t, "ScanEntries", err, IntegrityEntryCorrupt, i)
	})

	t.Run("leaf hash flipped in a full tile", func(t *testing.T) {
		const i = 512 + 7 // tile 0/2
		_, l, rec := base.mustFault(t, flipByte(tileKey(base.id, 0, 2), 7*merkle.HashSize+3))
		_, err := l.Entry(i)
		wantIntegrity(t, "Entry", err, IntegrityLeafMismatch, i)
		wantIntegrity(t, "Entries", scan(l, 0, n), IntegrityLeafMismatch, i)
		cp := l.Checkpoint()
		// The proofs of the entry and of its neighbours in the same run of
		// 16 use the flipped hash: none is served unverified.
		for _, j := range []uint64{i, i - 1, 512, 512 + 15} {
			_, _, err := l.VerifiedLeafInclusion(j, cp.Size)
			wantIntegrity(t, fmt.Sprintf("VerifiedLeafInclusion(%d)", j), err, IntegrityRootMismatch, int64(j))
			// Without the check the proof would have been wrong.
			leaf, p, err := l.LeafInclusion(j, cp.Size)
			if err != nil {
				t.Fatal(err)
			}
			if tlog.CheckRecord(toTlogProof(p), int64(cp.Size), tlog.Hash(cp.Root), int64(j), tlog.Hash(leaf)) == nil {
				t.Errorf("the unchecked proof of %d verifies: the flip missed it", j)
			}
		}
		// A neighbour's own entry is intact; leaves outside the run are
		// proved through the tile's level-4 hashes and still verify.
		if _, err := l.Entry(i - 1); err != nil {
			t.Errorf("Entry(%d): %v", i-1, err)
		}
		for _, j := range []uint64{0, 511, 512 + 16, n - 1} {
			wantVerifiedProof(t, l, j, cp)
		}
		// A size other than the checkpoint's goes through the consistency
		// check: the root rebuilt at a size inside the flipped run is caught.
		_, _, err = l.VerifiedLeafInclusion(3, i+1)
		wantIntegrity(t, "VerifiedLeafInclusion at size i+1", err, IntegrityRootMismatch, -1)
		if len(rec.all()) == 0 {
			t.Error("the handler was told nothing")
		}
	})

	t.Run("tile missing", func(t *testing.T) {
		_, l, _ := base.mustFault(t, deleteKey(tileKey(base.id, 0, 1)))
		_, err := l.Entry(300)
		wantIntegrity(t, "Entry", err, IntegrityTileMissing, 300)
		wantIntegrity(t, "Entries", scan(l, 200, 400), IntegrityTileMissing, 256)
		err = l.ScanEntries(context.Background(), 200, 400, func(*Record) error { return nil })
		wantIntegrity(t, "ScanEntries", err, IntegrityTileMissing, 256)
		_, _, err = l.LeafInclusion(300, n)
		wantIntegrity(t, "LeafInclusion", err, IntegrityTileMissing, 300)
		_, err = l.InclusionProof(300, n)
		wantIntegrity(t, "InclusionProof", err, IntegrityTileMissing, 300)
		_, err = l.Tile(0, 1, 256)
		wantIntegrity(t, "Tile", err, IntegrityTileMissing, -1)
		_, err = l.RootAt(300)
		wantIntegrity(t, "RootAt", err, IntegrityTileMissing, -1)
		_, err = l.ConsistencyProof(300, n)
		wantIntegrity(t, "ConsistencyProof", err, IntegrityTileMissing, -1)
		wantVerifiedProof(t, l, 0, l.Checkpoint())
	})

	t.Run("tile truncated", func(t *testing.T) {
		_, l, _ := base.mustFault(t, setKey(tileKey(base.id, 0, 1), make([]byte, 33)))
		_, err := l.Entry(300)
		wantIntegrity(t, "Entry", err, IntegrityTileMismatch, 300)
		_, _, err = l.LeafInclusion(300, n)
		wantIntegrity(t, "LeafInclusion", err, IntegrityTileMismatch, 300)
	})
}

// TestIntegrityCleanStore reads a sound store every way, across tile (256)
// and read batch (1,024) boundaries, and requires no alarm.
func TestIntegrityCleanStore(t *testing.T) {
	t.Parallel()
	const n = 2100
	base := newFaultBase(t, n, 333)
	s, l, rec := base.mustFault(t, nil)
	cp := l.Checkpoint()
	for _, r := range [][2]uint64{{0, n}, {255, 257}, {1023, 1025}, {256, 1024}, {1000, 2049}, {n - 1, n}} {
		next := r[0]
		err := l.Entries(context.Background(), r[0], r[1], func(rec *Record) error {
			if rec.Index != next || rec.Leaf.ID != corruptEntryID(int(next)) || rec.LeafHash != mustLeafHash(t, l, next) {
				return fmt.Errorf("record %d (%s, %s) at %d", rec.Index, rec.Leaf.ID, rec.LeafHash, next)
			}
			next++
			return nil
		})
		if err != nil || next != r[1] {
			t.Errorf("Entries(%d, %d): %v, stopped at %d", r[0], r[1], err, next)
		}
	}
	for _, i := range []uint64{0, 255, 256, 1023, 1024, n - 1} {
		if _, err := l.Entry(i); err != nil {
			t.Errorf("Entry(%d): %v", i, err)
		}
		if _, err := l.EntryByID(corruptEntryID(int(i))); err != nil {
			t.Errorf("EntryByID(%d): %v", i, err)
		}
		wantVerifiedProof(t, l, i, cp)
		for _, size := range []uint64{i + 1, n - 7} {
			if i < size {
				if _, _, err := l.VerifiedLeafInclusion(i, size); err != nil {
					t.Errorf("VerifiedLeafInclusion(%d, %d): %v", i, size, err)
				}
			}
		}
	}
	res, err := l.Append(testCtx(t, 30e9), []Entry{corruptEntry(1024), corruptEntry(n)})
	if err != nil || !res.Entries[0].Duplicate || res.Entries[1].Duplicate {
		t.Fatalf("append: %+v, %v", res, err)
	}
	// The tree beyond the latest checkpoint is anchored on the committed
	// tree.
	if _, _, err := l.VerifiedLeafInclusion(n, n+1); err != nil {
		t.Errorf("VerifiedLeafInclusion beyond the checkpoint: %v", err)
	}
	if got := rec.all(); len(got) != 0 {
		t.Errorf("false alarms: %v", got)
	}
	for _, k := range []string{IntegrityEntryMissing, IntegrityEntryCorrupt, IntegrityLeafMismatch, IntegrityTileMissing, IntegrityTileMismatch, IntegrityRootMismatch} {
		if v := violations(s, k); v != 0 {
			t.Errorf("violations{kind=%s} = %v", k, v)
		}
	}
}

// wantVerifiedProof requires VerifiedLeafInclusion of i at cp to give the
// tree's leaf and a proof tlog accepts against the signed checkpoint.
func wantVerifiedProof(t *testing.T, l *Log, i uint64, cp *SignedCheckpoint) {
	t.Helper()
	leaf, p, err := l.VerifiedLeafInclusion(i, cp.Size)
	if err != nil {
		t.Fatalf("VerifiedLeafInclusion(%d, %d): %v", i, cp.Size, err)
	}
	if err := tlog.CheckRecord(toTlogProof(p), int64(cp.Size), tlog.Hash(cp.Root), int64(i), tlog.Hash(leaf)); err != nil {
		t.Errorf("proof of %d in %d: %v", i, cp.Size, err)
	}
}

func toTlogProof(p []merkle.Hash) tlog.RecordProof {
	out := make(tlog.RecordProof, len(p))
	for i, h := range p {
		out[i] = tlog.Hash(h)
	}
	return out
}

// mustLeafHash reads leaf i's hash from the tiles.
func mustLeafHash(t *testing.T, l *Log, i uint64) merkle.Hash {
	t.Helper()
	h, err := l.treeLeaf(i)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

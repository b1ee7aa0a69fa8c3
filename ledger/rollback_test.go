package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
)

// rollbackFixture is a cleanly closed store whose newest Pebble WAL holds
// the tail of its log: sizes[i] is the tree size after commit i, wals[i]
// the newest WAL then and walAt[i] its length, notes[size] the checkpoint
// signed at size.
type rollbackFixture struct {
	cfg   testStoreConfig
	log   string
	sizes []uint64
	wals  []string
	walAt []int64
	notes map[uint64][]byte
	wal   string
}

// newRollbackFixture appends commits of per entries to one log of a real
// store, waiting after each for the checkpoint that covers it, and closes
// the store.
func newRollbackFixture(t *testing.T, commits, per int, opts ...Option) *rollbackFixture {
	t.Helper()
	s, _ := newTestStore(t, append([]Option{WithCheckpointInterval(1)}, opts...)...)
	cfg := testConfig(t, s)
	f := &rollbackFixture{cfg: cfg, log: "rb", notes: map[uint64][]byte{}}
	l := mustCreateLog(t, s, f.log)
	if cp := l.Checkpoint(); cp != nil { // the empty log's, signed at creation
		f.notes[cp.Size] = cp.Note
	}
	for c := range commits {
		es := make([]Entry, per)
		for i := range es {
			es[i] = Entry{ID: fmt.Sprintf("e-%d-%d", c, i), Payload: []byte(fmt.Sprintf(`{"c":%d,"i":%d}`, c, i)), PayloadJSON: true}
		}
		res := mustAppend(t, l, es...)
		cp, err := l.WaitCheckpoint(testCtx(t, 30e9), res.Size)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size != res.Size {
			t.Fatalf("checkpoint at %d, want %d", cp.Size, res.Size)
		}
		f.notes[cp.Size] = cp.Note
		f.wal = newestWAL(t, cfg.dir)
		fi, err := os.Stat(f.wal)
		if err != nil {
			t.Fatal(err)
		}
		f.sizes = append(f.sizes, res.Size)
		f.wals = append(f.wals, f.wal)
		f.walAt = append(f.walAt, fi.Size())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if w := newestWAL(t, cfg.dir); w != f.wal {
		t.Fatalf("newest WAL changed from %s to %s while closing", f.wal, w)
	}
	return f
}

// truncateWAL cuts the newest WAL back to its length after the first
// commit it holds, as a disk that lost the later synced writes would, and
// returns the tree size that is left. Pebble starts with small memtables
// and rotates the WAL with each, so the newest WAL holds only the latest
// commits.
func (f *rollbackFixture) truncateWAL(t *testing.T) uint64 {
	t.Helper()
	k := slices.Index(f.wals, f.wal)
	if k < 0 || k == len(f.wals)-1 {
		t.Fatalf("the newest WAL %s holds fewer than two commits: %v", f.wal, f.wals)
	}
	if err := os.Truncate(f.wal, f.walAt[k]); err != nil {
		t.Fatal(err)
	}
	return f.sizes[k]
}

// last returns the size and note of the last checkpoint signed.
func (f *rollbackFixture) last() (uint64, []byte) {
	n := f.sizes[len(f.sizes)-1]
	return n, f.notes[n]
}

func (f *rollbackFixture) open(opts ...Option) (*Store, error) {
	return Open(f.cfg.dir, f.cfg.signer, f.cfg.verifier, append(slices.Clone(f.cfg.opts), opts...)...)
}

// newestWAL returns the Pebble WAL file (NNNNNN.log) with the highest
// number in dir.
func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wals []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") && !e.IsDir() {
			wals = append(wals, e.Name())
		}
	}
	if len(wals) == 0 {
		t.Fatalf("no WAL (*.log) in %s", dir)
	}
	slices.Sort(wals) // zero-padded numbers sort as numbers
	return filepath.Join(dir, wals[len(wals)-1])
}

// integritySeen records what the integrity handler was told.
type integritySeen struct {
	mu   sync.Mutex
	seen []IntegrityError
}

func (r *integritySeen) handler() Option {
	return WithIntegrityHandler(func(e *IntegrityError) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen = append(r.seen, *e)
	})
}

func (r *integritySeen) kinds(log string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.seen {
		if e.Log == log {
			out = append(out, e.Kind)
		}
	}
	return out
}

// newEntries returns n entries with ids prefix-0 ... prefix-(n-1).
func newEntries(prefix string, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte(fmt.Sprintf(`{"%s":%d}`, prefix, i)), PayloadJSON: true}
	}
	return es
}

// wantRefused checks that err is Open's refusal naming log with kind, and
// that its message carries each of the strings in want.
func wantRefused(t *testing.T, err error, log, kind string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Open succeeded; want it refused for log %s (%s)", log, kind)
	}
	var re *RollbackError
	if !errors.As(err, &re) {
		t.Fatalf("Open: %v; want a *RollbackError", err)
	}
	if !errors.Is(err, ErrIntegrity) {
		t.Errorf("errors.Is(err, ErrIntegrity) is false for %v", err)
	}
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.Log != log || ie.Kind != kind {
		t.Errorf("errors.As finds %+v; want log %s kind %s", ie, log, kind)
	}
	for _, w := range append([]string{log, "Restore the data directory from a backup", "--rollback-read-only"}, want...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q: %v", w, err)
		}
	}
}

// TestRollbackRefusedAtOpen is the regression test of issue 8, defect 2:
// truncating the newest WAL of a cleanly closed store lost 10,000 signed
// entries; Open succeeded silently with the smaller tree and a later
// append signed a different checkpoint at the same size (a fork). Now Open
// refuses, naming the log, both sizes and the remedy, again on every try.
func TestRollbackRefusedAtOpen(t *testing.T) {
	t.Parallel()
	f := newRollbackFixture(t, 20, 1000)
	left := f.truncateWAL(t)
	top, topNote := f.last()
	if top-left < 5000 {
		t.Fatalf("truncation keeps %d of %d entries; want at least 5,000 lost", left, top)
	}
	for try := range 2 {
		var seen integritySeen
		s, err := f.open(seen.handler())
		if err == nil {
			// What the fix prevents: the store opened behind its signed
			// checkpoint; show the fork that follows.
			defer s.Close()
			l := mustLog(t, s, f.log)
			t.Errorf("opened with %d entries, behind the checkpoint signed at %d", l.Size(), top)
			res := mustAppend(t, l, newEntries("new", int(top-l.Size()))...)
			cp, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
			if err != nil {
				t.Fatal(err)
			}
			if old, ok := f.notes[cp.Size]; ok && !bytes.Equal(old, cp.Note) {
				t.Fatalf("signed a fork at size %d:\nbefore: %s\nnow:    %s", cp.Size, old, cp.Note)
			}
			t.FailNow()
		}
		wantRefused(t, err, f.log, IntegrityRollback, fmt.Sprintf("holds %d entries", left), fmt.Sprintf("signed at size %d", top))
		if k := seen.kinds(f.log); !slices.Equal(k, []string{IntegrityRollback}) {
			t.Errorf("try %d: the integrity handler saw %v, want one rollback", try, k)
		}
		got, err := os.ReadFile(filepath.Join(f.cfg.dir, "checkpoints", f.log))
		if err != nil || !bytes.Equal(got, topNote) {
			t.Fatalf("try %d: the checkpoint file changed: %q, %v", try, got, err)
		}
	}
}

// TestRollbackReadOnly: with the opt-in, the log that lost its tail opens
// read-only: what storage holds reads and proves, appends get ErrReadOnly
// (not an integrity 500), nothing is signed, and the integrity handler is
// told. Reopened without the opt-in it is refused again.
func TestRollbackReadOnly(t *testing.T) {
	t.Parallel()
	f := newRollbackFixture(t, 10, 300) // a smaller loss than the regression test's, for -race
	left := f.truncateWAL(t)
	top, topNote := f.last()
	var seen integritySeen
	s, err := f.open(seen.handler(), WithReadOnlyOnRollback(true))
	if err != nil {
		t.Fatalf("Open with the read-only opt-in: %v", err)
	}
	l := mustLog(t, s, f.log)
	if k := seen.kinds(f.log); !slices.Equal(k, []string{IntegrityRollback}) {
		t.Errorf("the integrity handler saw %v, want one rollback", k)
	}
	if got := metricValue(t, s, "ledger_integrity_violations_total", "log", f.log, "kind", IntegrityRollback); got != 1 {
		t.Errorf("violations counted %v, want 1", got)
	}
	if l.Size() != left || left >= top {
		t.Fatalf("size %d, want %d (below the signed %d)", l.Size(), left, top)
	}
	if !errors.Is(l.ReadOnly(), ErrReadOnly) {
		t.Fatalf("ReadOnly() = %v", l.ReadOnly())
	}
	_, err = l.Append(testCtx(t, 10*time.Second), newEntries("new", 3))
	if !errors.Is(err, ErrReadOnly) || errors.Is(err, ErrIntegrity) {
		t.Fatalf("Append: %v; want ErrReadOnly and not ErrIntegrity (the API would answer 500)", err)
	}
	_, err = l.AppendSource(testCtx(t, 10*time.Second), nil, []byte("pos"))
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("AppendSource: %v; want ErrReadOnly", err)
	}
	if _, err := s.CreateLog(f.log); err != nil {
		t.Fatalf("CreateLog of the existing read-only log: %v", err)
	}
	// The checkpoint served is one signed before, which the tree backs.
	cp := l.Checkpoint()
	if cp == nil || cp.Size > left || !bytes.Equal(cp.Note, f.notes[cp.Size]) {
		t.Fatalf("checkpoint %+v; want one signed before, at most %d", cp, left)
	}
	if r := mustRootAt(t, l, cp.Size); r != cp.Root {
		t.Fatalf("root at %d %s, checkpoint %s", cp.Size, r, cp.Root)
	}
	for _, i := range []uint64{0, 255, 256, cp.Size - 1} {
		rec := mustEntry(t, l, i)
		p, err := l.InclusionProof(i, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkle.VerifyInclusion(i, cp.Size, rec.LeafHash, p, cp.Root); err != nil {
			t.Fatalf("inclusion of %d in %d: %v", i, cp.Size, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.WaitCheckpoint(ctx, left+1); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WaitCheckpoint past the tree: %v; want ErrReadOnly at once", err)
	}
	// The first append of another log works as usual.
	other := mustCreateLog(t, s, "other")
	res := mustAppend(t, other, newEntries("o", 10)...)
	if _, err := other.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, s, "ledger_checkpoints_signed_total", "log", f.log); got != 0 {
		t.Errorf("%v checkpoints signed for the read-only log", got)
	}
	got, err := os.ReadFile(filepath.Join(f.cfg.dir, "checkpoints", f.log))
	if err != nil || !bytes.Equal(got, topNote) {
		t.Fatalf("the checkpoint file changed: %q, %v", got, err)
	}
	// Nothing new was stored either: reopen read-only and list them.
	s, err = f.open(WithReadOnlyOnRollback(true))
	if err != nil {
		t.Fatal(err)
	}
	cps, err := mustLog(t, s, f.log).Checkpoints(0, ^uint64(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if !bytes.Equal(c.Note, f.notes[c.Size]) {
			t.Errorf("stored checkpoint at %d was not signed before the loss: %s", c.Size, c.Note)
		}
	}
	s.Close()
	_, err = f.open()
	wantRefused(t, err, f.log, IntegrityRollback)
}

// twoStores returns two stores with one key in different directories.
func twoStores(t *testing.T, opts ...Option) (a, b *Store) {
	t.Helper()
	a, _ = newTestStore(t, opts...)
	cfg := testConfig(t, a)
	cfg.dir = t.TempDir()
	return a, openTestStore(t, cfg)
}

func cpFile(s *Store, log string) string { return s.cpFiles.path(log) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// closeAndOpen closes s and opens its directory again with extra options;
// the result is closed by the caller.
func closeAndOpen(t *testing.T, s *Store, extra ...Option) (*Store, error) {
	t.Helper()
	cfg := testConfig(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return Open(cfg.dir, cfg.signer, cfg.verifier, append(slices.Clone(cfg.opts), extra...)...)
}

// TestRollbackInconsistent: storage as large as the file's checkpoint, or
// larger, but with other entries (its root at the file's size differs) is
// refused as inconsistent; so is a different tree of the same size.
func TestRollbackInconsistent(t *testing.T) {
	t.Parallel()
	for _, extra := range []int{0, 1, 600} {
		t.Run(fmt.Sprint("larger by ", extra), func(t *testing.T) {
			a, b := twoStores(t, WithCheckpointInterval(time.Millisecond))
			la, lb := mustCreateLog(t, a, "x"), mustCreateLog(t, b, "x")
			ra := mustAppend(t, la, newEntries("a", 300)...)
			if _, err := la.WaitCheckpoint(testCtx(t, 30*time.Second), ra.Size); err != nil {
				t.Fatal(err)
			}
			es := newEntries("a", 300+extra)
			es[200].Payload = []byte(`{"changed":true}`) // one entry differs
			rb := mustAppend(t, lb, es...)
			if _, err := lb.WaitCheckpoint(testCtx(t, 30*time.Second), rb.Size); err != nil {
				t.Fatal(err)
			}
			copyFile(t, cpFile(a, "x"), cpFile(b, "x"))
			var seen integritySeen
			s, err := closeAndOpen(t, b, seen.handler())
			if err == nil {
				s.Close()
			}
			wantRefused(t, err, "x", IntegrityRollback, "inconsistent", "at size 300")
			s, err = closeAndOpen(t, b, WithReadOnlyOnRollback(true))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l := mustLog(t, s, "x")
			if l.Checkpoint() != nil && l.Checkpoint().Size > 300 {
				t.Errorf("serves checkpoint %d beyond the file's 300", l.Checkpoint().Size)
			}
			if _, err := l.Append(testCtx(t, 10*time.Second), newEntries("n", 1)); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("Append: %v", err)
			}
		})
	}
}

// TestCheckpointFileTampered: a checkpoint file that does not verify
// (edited, garbage, empty, another key's, another log's) is refused with
// a clear error, not ignored or overwritten.
func TestCheckpointFileTampered(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t, WithCheckpointInterval(time.Millisecond))
	other, _ := newTestStore(t, WithCheckpointInterval(time.Millisecond)) // another key
	for _, s := range []*Store{a, b, other} {
		for _, name := range []string{"x", "y"} {
			l := mustCreateLog(t, s, name)
			res := mustAppend(t, l, newEntries(name, 30)...)
			if _, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size); err != nil {
				t.Fatal(err)
			}
		}
	}
	good, err := os.ReadFile(cpFile(a, "x"))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(cpFile(other, "x"))
	otherLog, _ := os.ReadFile(cpFile(a, "y"))
	pt := t
	for name, content := range map[string][]byte{
		"size edited":    bytes.Replace(good, []byte("\n30\n"), []byte("\n29\n"), 1),
		"root edited":    append(append([]byte{}, good[:len("ledger-test.example/x\n30\n")]...), append([]byte("A"), good[len("ledger-test.example/x\n30\n")+1:]...)...),
		"garbage":        []byte("not a checkpoint\x00\xff"),
		"empty":          {},
		"another key":    otherKey,
		"another log":    otherLog,
		"signature gone": good[:bytes.Index(good, []byte("\n\n"))+2],
	} {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(content, good) {
				t.Fatal("the tampered file is the good one")
			}
			if err := os.WriteFile(cpFile(b, "x"), content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := closeAndOpen(t, b)
			if err == nil {
				s.Close()
			}
			wantRefused(t, err, "x", IntegrityCheckpointBad, cpFile(b, "x"), "does not hold a checkpoint")
			if got, _ := os.ReadFile(cpFile(b, "x")); !bytes.Equal(got, content) {
				t.Fatal("the refused file was overwritten")
			}
			var seen integritySeen
			s, err = closeAndOpen(t, b, seen.handler(), WithReadOnlyOnRollback(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mustLog(t, s, "x").Append(testCtx(t, 10*time.Second), newEntries("n", 1)); !errors.Is(err, ErrReadOnly) {
				t.Errorf("Append: %v", err)
			}
			if _, err := mustLog(t, s, "y").Append(testCtx(t, 10*time.Second), newEntries("n", 1)); err != nil {
				t.Errorf("Append to the intact log y: %v", err)
			}
			if k := seen.kinds("x"); !slices.Equal(k, []string{IntegrityCheckpointBad}) {
				t.Errorf("the integrity handler saw %v", k)
			}
			s.Close()
			// Reopened under the test's cleanup for the next case.
			b = reopenDir(pt, b)
		})
	}
}

// reopenDir opens the directory of the closed store s again, registering
// it for reopen and cleanup; the checkpoint file of x is restored first.
func reopenDir(t *testing.T, s *Store) *Store {
	t.Helper()
	cfg := testConfig(t, s)
	if err := os.Remove(cpFile(s, "x")); err != nil {
		t.Fatal(err)
	}
	return openTestStore(t, cfg)
}

// TestCheckpointFileOrphan: a checkpoint file for a log storage does not
// hold at all is refused; read-only, that log does not exist and cannot be
// created (its first append would sign a fork at size 1).
func TestCheckpointFileOrphan(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t, WithCheckpointInterval(time.Millisecond))
	l := mustCreateLog(t, a, "gone")
	res := mustAppend(t, l, newEntries("g", 5)...)
	if _, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size); err != nil {
		t.Fatal(err)
	}
	copyFile(t, cpFile(a, "gone"), cpFile(b, "gone"))
	s, err := closeAndOpen(t, b)
	if err == nil {
		s.Close()
	}
	wantRefused(t, err, "gone", IntegrityRollback, "no log gone at all", "signed at size 5")
	var seen integritySeen
	s, err = closeAndOpen(t, b, seen.handler(), WithReadOnlyOnRollback(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Log("gone"); !errors.Is(err, ErrLogNotFound) {
		t.Errorf("Log(gone): %v", err)
	}
	if _, err := s.CreateLog("gone"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("CreateLog(gone): %v; want ErrReadOnly", err)
	}
	lf, err := s.LogForAppend("gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lf.Append(testCtx(t, 10*time.Second), newEntries("g", 5)); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Append(gone): %v; want ErrReadOnly", err)
	}
	if ls := s.Logs(); len(ls) != 0 {
		t.Errorf("Logs() = %v", ls)
	}
	if k := seen.kinds("gone"); !slices.Equal(k, []string{IntegrityRollback}) {
		t.Errorf("the integrity handler saw %v", k)
	}
	if got, _ := os.ReadFile(cpFile(s, "gone")); !bytes.Contains(got, []byte("\n5\n")) {
		t.Errorf("the file changed: %q", got)
	}
}

// TestCheckpointFileCreatedForOldStore: a store from before checkpoint
// files gets each log's file from its latest stored checkpoint at open,
// logged; after that a loss is caught.
func TestCheckpointFileCreatedForOldStore(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	s, _ := newTestStore(t, WithCheckpointInterval(time.Millisecond), WithLogger(logger))
	l := mustCreateLog(t, s, "old")
	res := mustAppend(t, l, newEntries("o", 2000)...)
	cp, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
	if err != nil {
		t.Fatal(err)
	}
	mustCreateLog(t, s, "empty") // a checkpoint of size 0
	dir := filepath.Dir(cpFile(s, "old"))
	s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s, err = closeAndOpen(t, s)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := os.ReadFile(cpFile(s, "old"))
	if err != nil || !bytes.Equal(got, cp.Note) {
		t.Fatalf("file %q, %v; want the latest checkpoint", got, err)
	}
	// The empty log has its checkpoint of size 0, and a file of it.
	if got, err := os.ReadFile(cpFile(s, "empty")); err != nil || !bytes.Contains(got, []byte("/empty\n0\n")) {
		t.Errorf("the empty log's file: %q, %v; want its checkpoint of size 0", got, err)
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "checkpoint file created from the latest stored checkpoint") || !strings.Contains(logs.String(), "log=old") {
		t.Errorf("not logged:\n%s", logs.String())
	}
	mu.Unlock()
	if !bytes.Equal(mustLog(t, s, "old").Checkpoint().Note, cp.Note) {
		t.Error("a different checkpoint is published")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestCheckpointFileNeverBehind: every checkpoint the log publishes is
// already in its file (the file is never behind a published checkpoint),
// with concurrent appends and a short interval.
func TestCheckpointFileNeverBehind(t *testing.T) {
	t.Parallel()
	s, v := newTestStore(t, WithCheckpointInterval(time.Millisecond))
	l := mustCreateLog(t, s, "f")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var n uint64
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			cp, err := l.WaitCheckpoint(context.Background(), n+1)
			if err != nil {
				done <- err
				return
			}
			b, err := os.ReadFile(cpFile(s, "f"))
			if err != nil {
				done <- err
				return
			}
			fc, err := merkle.OpenCheckpoint(b, v, l.Origin())
			if err != nil {
				done <- err
				return
			}
			if fc.Size < cp.Size {
				done <- fmt.Errorf("published %d while the file holds %d", cp.Size, fc.Size)
				return
			}
			n = cp.Size
		}
	}()
	for i := range 40 {
		mustAppend(t, l, newEntries(fmt.Sprint("b", i), 50)...)
	}
	close(stop)
	// Wake the waiter if it waits past the end.
	mustAppend(t, l, newEntries("last", 1)...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointFileStoredCheckpointNewer: a crash after a checkpoint was
// stored in Pebble and before its file was written leaves the file behind
// the stored checkpoint; Open brings the file up to it before publishing.
// A file newer than the stored history (Pebble lost only the checkpoint
// key) is published and stored again rather than signed anew.
func TestCheckpointFileStoredCheckpointNewer(t *testing.T) {
	t.Parallel()
	f := newRollbackFixture(t, 3, 700)
	// The file behind: as if the last file write never happened.
	path := filepath.Join(f.cfg.dir, "checkpoints", f.log)
	if err := os.WriteFile(path, f.notes[f.sizes[1]], 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := f.open()
	if err != nil {
		t.Fatal(err)
	}
	top, topNote := f.last()
	if got, _ := os.ReadFile(path); !bytes.Equal(got, topNote) {
		t.Errorf("file not brought up to the stored checkpoint %d: %q", top, got)
	}
	if cp := mustLog(t, s, f.log).Checkpoint(); !bytes.Equal(cp.Note, topNote) {
		t.Errorf("published %d", cp.Size)
	}
	// Pebble loses the latest checkpoint key only.
	if err := s.db.Delete(checkpointKey(mustLog(t, s, f.log).id, top), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = f.open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := mustLog(t, s, f.log)
	if cp := l.Checkpoint(); !bytes.Equal(cp.Note, topNote) {
		t.Errorf("published %d, want the file's %d", cp.Size, top)
	}
	cps, err := l.Checkpoints(top, top, 0)
	if err != nil || len(cps) != 1 {
		t.Errorf("the file's checkpoint was not stored again: %v %v", cps, err)
	}
	if got := metricValue(t, s, "ledger_checkpoints_signed_total", "log", f.log); got != 0 {
		t.Errorf("%v checkpoints signed", got)
	}
}

// TestSignGuard: sign itself refuses a checkpoint below the file's size,
// or at its size with another root, whatever the caller: the log becomes
// read-only and nothing is stored or published.
func TestSignGuard(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	for _, tc := range []struct {
		name       string
		size, pinN uint64
		sameRoot   bool
	}{
		{"below", 5, 10, false},
		{"same size other root", 10, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen integritySeen
			s.opts.onIntegrity = nil
			seen.handler()(&s.opts)
			l := newLog(s, "guard-"+strings.ReplaceAll(tc.name, " ", "-"), 1000)
			l.w.size, l.w.root = tc.size, merkle.LeafHash([]byte("w"))
			l.pinned = &SignedCheckpoint{Checkpoint: merkle.Checkpoint{Origin: l.Origin(), Size: tc.pinN, Root: merkle.LeafHash([]byte("p"))}}
			l.sign()
			if l.Checkpoint() != nil {
				t.Fatal("published a checkpoint")
			}
			if !errors.Is(l.ReadOnly(), ErrReadOnly) {
				t.Fatal("not read-only")
			}
			if k := seen.kinds(l.name); !slices.Equal(k, []string{IntegrityRollback}) {
				t.Errorf("integrity handler saw %v", k)
			}
			if cps, _ := l.Checkpoints(0, ^uint64(0), 0); len(cps) != 0 {
				t.Errorf("stored %d checkpoints", len(cps))
			}
			if _, err := os.Stat(cpFile(s, l.name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("wrote a file: %v", err)
			}
		})
	}
	s.opts.onIntegrity = nil
}

// TestCheckpointDirElsewhere: WithCheckpointDir keeps the files in another
// directory; a loss is caught there too, and nothing is written inside the
// store's directory.
func TestCheckpointDirElsewhere(t *testing.T) {
	t.Parallel()
	cdir := filepath.Join(t.TempDir(), "cps", "nested")
	f := newRollbackFixture(t, 10, 300, WithCheckpointDir(cdir))
	if _, err := os.Stat(filepath.Join(f.cfg.dir, "checkpoints")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoints directory in the store's directory: %v", err)
	}
	if _, top := f.last(); true {
		got, err := os.ReadFile(filepath.Join(cdir, f.log))
		if err != nil || !bytes.Equal(got, top) {
			t.Fatalf("file %q %v", got, err)
		}
	}
	f.truncateWAL(t)
	_, err := f.open()
	wantRefused(t, err, f.log, IntegrityRollback, cdir)
}

// TestCheckpointFileLeftovers: temporary files a crash left in the
// checkpoint directory are removed at open; files that cannot name a log
// are ignored (with a warning), not taken for checkpoint files.
func TestCheckpointFileLeftovers(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(time.Millisecond))
	l := mustCreateLog(t, s, "k")
	res := mustAppend(t, l, newEntries("k", 10)...)
	cp, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(cpFile(s, "k"))
	for _, n := range []string{".tmp-k-123456", ".tmp-other-1", "junk~", "-dash"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := closeAndOpen(t, s)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s2.Close()
	for n, want := range map[string]bool{".tmp-k-123456": false, ".tmp-other-1": false, "junk~": true, "-dash": true, "k": true} {
		_, err := os.Stat(filepath.Join(dir, n))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v", n, got, want)
		}
	}
	if !bytes.Equal(mustLog(t, s2, "k").Checkpoint().Note, cp.Note) {
		t.Error("another checkpoint is published")
	}
}

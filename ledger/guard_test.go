package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
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

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// guardFile is the guard copy of log in the guard dir g of the store s.
func guardFile(s *Store, g, log string) string {
	return filepath.Join(g, GuardKeyDir(s.verifier), log)
}

// restoreDir replaces the directory to with a copy of from, as restoring
// a backup over it does.
func restoreDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	copyDir(t, from, to)
}

// TestGuardCatchesRestore (issue 26, item 3): a store's directory, its
// checkpoint files inside it, restored from a copy taken before its last
// checkpoints opens without complaint (the hole: it would sign a fork);
// with a guard dir outside it, the guard copy is ahead of the restored
// tree and Open refuses, naming the guard copy, whatever path the copy is
// restored to; read-only on request, serving the copy's own checkpoint.
func TestGuardCatchesRestore(t *testing.T) {
	t.Parallel()
	g := t.TempDir()
	s, _ := newTestStore(t, WithCheckpointInterval(time.Millisecond), WithCheckpointGuardDir(g))
	cfg := testConfig(t, s)
	l := mustCreateLog(t, s, "r")
	res := mustAppend(t, l, newEntries("a", 1300)...)
	old, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	s.Close()
	copyDir(t, cfg.dir, backup)
	s = openTestStore(t, cfg)
	l = mustLog(t, s, "r")
	res = mustAppend(t, l, newEntries("b", 700)...)
	top, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got, err := os.ReadFile(guardFile(s, g, "r")); err != nil || !bytes.Equal(got, top.Note) {
		t.Fatalf("guard copy %q, %v; want the last checkpoint", got, err)
	}

	for _, dir := range []string{cfg.dir, filepath.Join(t.TempDir(), "elsewhere")} {
		restoreDir(t, backup, dir)
		// Without the guard: the restored store opens 700 signed entries
		// behind, and would sign a fork.
		s, err := Open(dir, cfg.signer, cfg.verifier, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatalf("the restored store without a guard: %v", err)
		}
		if n := mustLog(t, s, "r").Size(); n != 1300 {
			t.Fatalf("restored size %d", n)
		}
		s.Close()
		restoreDir(t, backup, dir) // that open may have changed nothing, but start clean
		_, err = Open(dir, cfg.signer, cfg.verifier, WithLogger(slog.New(slog.DiscardHandler)), WithCheckpointGuardDir(g))
		wantRefused(t, err, "r", IntegrityRollback, "storage holds 1300 entries", "guard copy "+guardFile(s, g, "r"), "signed at size 2000", "700 signed entries are lost")
		var re *RollbackError
		if errors.As(err, &re) && (re.Dir != filepath.Join(dir, "checkpoints") || re.Guard != filepath.Dir(guardFile(s, g, "r"))) {
			t.Errorf("RollbackError{Dir: %q, Guard: %q}", re.Dir, re.Guard)
		}
	}
	var seen integritySeen
	s, err = Open(cfg.dir, cfg.signer, cfg.verifier, WithLogger(slog.New(slog.DiscardHandler)), WithCheckpointGuardDir(g),
		WithReadOnlyOnRollback(true), seen.handler())
	if err != nil {
		t.Fatal(err)
	}
	l = mustLog(t, s, "r")
	if cp := l.Checkpoint(); cp == nil || !bytes.Equal(cp.Note, old.Note) {
		t.Errorf("read-only log serves %v; want the backup's checkpoint", cp)
	}
	if _, err := l.Append(testCtx(t, 10*time.Second), newEntries("c", 1)); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Append: %v; want ErrReadOnly", err)
	}
	if k := seen.kinds("r"); !slices.Equal(k, []string{IntegrityRollback}) {
		t.Errorf("the integrity handler saw %v", k)
	}
	s.Close()
	if got, _ := os.ReadFile(guardFile(s, g, "r")); !bytes.Equal(got, top.Note) {
		t.Errorf("the guard copy changed: %q", got)
	}
}

// TestGuardCopyRewritten: a guard copy that is missing (a new guard dir, a
// store from before it) or behind (a run without the guard) is written
// from the latest checkpoint at open, logged; a checkpoint file behind a
// guard copy the tree backs (a crash between the two writes) is brought up
// to it and the guard's checkpoint stored again, not signed anew.
func TestGuardCopyRewritten(t *testing.T) {
	t.Parallel()
	g := t.TempDir()
	var logs syncBuf
	f := newRollbackFixture(t, 4, 500, WithCheckpointGuardDir(g), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	top, topNote := f.last()
	gpath := filepath.Join(g, GuardKeyDir(f.cfg.verifier), f.log)
	fpath := filepath.Join(f.cfg.dir, "checkpoints", f.log)
	for _, tc := range []struct {
		name, logged string
		prepare      func()
	}{
		{"missing", "guard copy created from the latest stored checkpoint", func() { os.Remove(gpath) }},
		{"behind", "guard copy brought up to the latest stored checkpoint", func() { os.WriteFile(gpath, f.notes[f.sizes[1]], 0o600) }},
		{"guard dir lost", "guard copy created from the latest stored checkpoint", func() { os.RemoveAll(g) }},
	} {
		tc.prepare()
		logs.reset()
		s, err := f.open()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s.Close()
		if got, err := os.ReadFile(gpath); err != nil || !bytes.Equal(got, topNote) {
			t.Errorf("%s: guard copy %q, %v; want the latest checkpoint", tc.name, got, err)
		}
		if !strings.Contains(logs.String(), tc.logged) {
			t.Errorf("%s: not logged %q:\n%s", tc.name, tc.logged, logs.String())
		}
	}

	// The file and Pebble behind the guard copy.
	s, err := f.open()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Delete(checkpointKey(mustLog(t, s, f.log).id, top), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.WriteFile(fpath, f.notes[f.sizes[1]], 0o600); err != nil {
		t.Fatal(err)
	}
	logs.reset()
	s, err = f.open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := mustLog(t, s, f.log)
	if cp := l.Checkpoint(); !bytes.Equal(cp.Note, topNote) {
		t.Errorf("published %d, want the guard copy's %d", cp.Size, top)
	}
	if got, _ := os.ReadFile(fpath); !bytes.Equal(got, topNote) {
		t.Errorf("checkpoint file not brought up to the guard copy: %q", got)
	}
	if !strings.Contains(logs.String(), "checkpoint file brought up to the guard copy") {
		t.Errorf("not logged:\n%s", logs.String())
	}
	if cps, err := l.Checkpoints(top, top, 0); err != nil || len(cps) != 1 {
		t.Errorf("the guard copy's checkpoint was not stored again: %v %v", cps, err)
	}
	if got := metricValue(t, s, "ledger_checkpoints_signed_total", "log", f.log); got != 0 {
		t.Errorf("%v checkpoints signed", got)
	}
}

// syncBuf is a bytes.Buffer for a logger written from many goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuf) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

// TestGuardCopiesNotOneHistory: the checkpoint file and the guard copy,
// both signed by the key, that cannot both be true (one size, two roots;
// or a smaller copy the tree, which backs the larger, contradicts) are a
// fork, refused or read-only; a guard copy of another history larger than
// the tree is a rollback. A guard copy that does not verify is refused
// like a bad checkpoint file.
func TestGuardCopiesNotOneHistory(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t, WithCheckpointInterval(time.Millisecond))
	ga := t.TempDir()
	la, lb := mustCreateLog(t, a, "x"), mustCreateLog(t, b, "x")
	ra := mustAppend(t, la, newEntries("a", 300)...)
	if _, err := la.WaitCheckpoint(testCtx(t, 30*time.Second), ra.Size); err != nil {
		t.Fatal(err)
	}
	other := map[uint64][]byte{} // checkpoints of b's history, where entry 100 differs
	es := newEntries("a", 400)
	es[100].Payload = []byte(`{"changed":true}`)
	for _, n := range []int{200, 300, 400} {
		res := mustAppend(t, lb, es[lb.Size():n]...)
		cp, err := lb.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size)
		if err != nil {
			t.Fatal(err)
		}
		other[cp.Size] = cp.Note
	}
	cfg := testConfig(t, a)
	a.Close()
	gpath := guardFile(a, ga, "x")
	if err := os.MkdirAll(filepath.Dir(gpath), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		guard []byte
		kind  string
		says  []string
	}{
		{"one size, two roots", other[300], IntegrityFork, []string{"two checkpoints signed at size 300 with different roots", "Fork evidence"}},
		{"smaller copy of another history", other[200], IntegrityFork, []string{"guard copy " + gpath + " holds the checkpoint signed at size 200", "two histories"}},
		{"larger copy of another history", other[400], IntegrityRollback, []string{"storage holds 300 entries", "guard copy " + gpath + " holds the checkpoint signed at size 400"}},
		{"guard copy edited", bytes.Replace(other[300], []byte("\n300\n"), []byte("\n299\n"), 1), IntegrityCheckpointBad, []string{"guard copy " + gpath + " does not hold a checkpoint"}},
	} {
		if err := os.WriteFile(gpath, tc.guard, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(cfg.dir, cfg.signer, cfg.verifier, append(slices.Clone(cfg.opts), WithCheckpointGuardDir(ga))...)
		wantRefused(t, err, "x", tc.kind, tc.says...)
		s, err := Open(cfg.dir, cfg.signer, cfg.verifier, append(slices.Clone(cfg.opts), WithCheckpointGuardDir(ga), WithReadOnlyOnRollback(true))...)
		if err != nil {
			t.Fatalf("%s: read-only: %v", tc.name, err)
		}
		if _, err := mustLog(t, s, "x").Append(testCtx(t, 10*time.Second), newEntries("n", 1)); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s: Append: %v", tc.name, err)
		}
		s.Close()
		if got, _ := os.ReadFile(gpath); !bytes.Equal(got, tc.guard) {
			t.Errorf("%s: the refused guard copy was overwritten", tc.name)
		}
	}
}

// TestGuardKeyDir: the guard copies of a key live in a directory named as
// the key's verifier key begins, the name path-escaped, so that no key
// name leaves the guard dir or collides with another key's directory.
func TestGuardKeyDir(t *testing.T) {
	for _, name := range []string{"example.com/log", "..", "a%2Fb", "ex.com"} {
		_, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := note.NewVerifier(vkey)
		if err != nil {
			t.Fatal(err)
		}
		d := GuardKeyDir(v)
		want := fmt.Sprintf("+%08x", v.KeyHash())
		if strings.ContainsRune(d, '/') || !strings.HasSuffix(d, want) || d == ".." || d == "." || filepath.Base(d) != d {
			t.Errorf("GuardKeyDir(%q) = %q", name, d)
		}
		if !strings.HasPrefix(vkey, strings.TrimSuffix(d, want)) && !strings.ContainsAny(name, "/%") {
			t.Errorf("GuardKeyDir(%q) = %q does not begin as the verifier key %q", name, d, vkey)
		}
	}
}

// TestGuardNeverBehind: with a guard, every checkpoint the log publishes
// is already in its file and its guard copy, with concurrent appends and
// a short interval.
func TestGuardNeverBehind(t *testing.T) {
	t.Parallel()
	g := t.TempDir()
	s, v := newTestStore(t, WithCheckpointInterval(time.Millisecond), WithCheckpointGuardDir(g))
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
			for _, p := range []string{cpFile(s, "f"), guardFile(s, g, "f")} {
				b, err := os.ReadFile(p)
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
					done <- fmt.Errorf("published %d while %s holds %d", cp.Size, p, fc.Size)
					return
				}
			}
			n = cp.Size
		}
	}()
	for i := range 40 {
		mustAppend(t, l, newEntries(fmt.Sprint("b", i), 50)...)
	}
	close(stop)
	mustAppend(t, l, newEntries("last", 1)...)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAppendSignEachGuard is BenchmarkAppendSignEach with a guard
// dir: each checkpoint is written to its file and its guard copy at once,
// so the latency is that of the slower write, not of both.
func BenchmarkAppendSignEachGuard(b *testing.B) {
	st := benchStore(b, WithCheckpointInterval(0), WithCheckpointGuardDir(b.TempDir()))
	l, err := st.CreateLog("sign")
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"a":1}`)
	for i := 0; b.Loop(); i++ {
		res, err := l.Append(context.Background(), []Entry{{ID: uuidLike(uint64(i)), Payload: payload, PayloadJSON: true}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.WaitCheckpoint(context.Background(), res.Size); err != nil {
			b.Fatal(err)
		}
	}
}

package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// TestCheckOpenMatchesOpen (issue 26, item 5): RawStore.CheckOpen, which
// auditd fsck runs, reports exactly what Open refuses or fails on, for
// each way a stopped store's checkpoints can be edited, lost or restored,
// and writes nothing; on a store it passes, Open succeeds.
func TestCheckOpenMatchesOpen(t *testing.T) {
	t.Parallel()
	g0 := t.TempDir()
	s, _ := newTestStore(t, WithCheckpointInterval(time.Millisecond), WithCheckpointGuardDir(g0))
	cfg := testConfig(t, s)
	x, y := mustCreateLog(t, s, "x"), mustCreateLog(t, s, "y")
	wait := func(l *Log, res *AppendResult) {
		if _, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), res.Size); err != nil {
			t.Fatal(err)
		}
	}
	wait(x, mustAppend(t, x, newEntries("x", 600)...))
	wait(y, mustAppend(t, y, newEntries("y", 30)...))
	s.Close()
	old := filepath.Join(t.TempDir(), "old")
	copyDir(t, cfg.dir, old)
	s = openTestStore(t, cfg)
	x = mustLog(t, s, "x")
	wait(x, mustAppend(t, x, newEntries("x2", 500)...)) // x: 1,100 entries, past 1,024
	s.Close()

	sign := func(log string, size uint64, root merkle.Hash) []byte {
		n, err := merkle.Checkpoint{Origin: cfg.signer.Name() + "/" + log, Size: size, Root: root}.Sign(cfg.signer)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	otherRoot := merkle.LeafHash([]byte("other"))
	skey, vkey, _ := note.GenerateKey(rand.Reader, testKeyName)
	otherSigner, _ := note.NewSigner(skey)
	otherVerifier, _ := note.NewVerifier(vkey)
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyDir := GuardKeyDir(cfg.verifier)
	type store struct{ dir, guard string }
	for _, tc := range []struct {
		name    string
		from    string // the store directory copied, default the latest
		edit    func(st store)
		another bool     // open with another key
		want    []string // "log kind" reported; "layout" for the whole store
		fatal   []string // logs whose latest stored checkpoint fails Open
	}{
		{name: "clean"},
		{name: "guard dir lost", edit: func(st store) { os.RemoveAll(st.guard) }},
		{name: "checkpoint dir lost", edit: func(st store) { os.RemoveAll(filepath.Join(st.dir, "checkpoints")) }},
		{name: "restored from before the last checkpoint", from: old, want: []string{"x rollback"}},
		{name: "restored, checkpoint dir lost", from: old, edit: func(st store) { os.RemoveAll(filepath.Join(st.dir, "checkpoints")) }, want: []string{"x rollback"}},
		{name: "file ahead", edit: func(st store) { write(filepath.Join(st.dir, "checkpoints", "x"), sign("x", 2000, otherRoot)) }, want: []string{"x rollback"}},
		{name: "file of another root", edit: func(st store) { write(filepath.Join(st.dir, "checkpoints", "x"), sign("x", 1100, otherRoot)) }, want: []string{"x fork"}},
		{name: "file and guard of another root", edit: func(st store) {
			write(filepath.Join(st.dir, "checkpoints", "x"), sign("x", 1100, otherRoot))
			write(filepath.Join(st.guard, keyDir, "x"), sign("x", 1100, otherRoot))
		}, want: []string{"x rollback"}},
		{name: "older file of another root", edit: func(st store) { write(filepath.Join(st.dir, "checkpoints", "x"), sign("x", 600, otherRoot)) }, want: []string{"x fork"}},
		{name: "file garbage", edit: func(st store) { write(filepath.Join(st.dir, "checkpoints", "y"), []byte("garbage")) }, want: []string{"y checkpoint_bad"}},
		{name: "guard copy empty", edit: func(st store) { write(filepath.Join(st.guard, keyDir, "y"), nil) }, want: []string{"y checkpoint_bad"}},
		{name: "file of a log storage does not hold", edit: func(st store) { write(filepath.Join(st.dir, "checkpoints", "ghost"), sign("ghost", 3, otherRoot)) }, want: []string{"ghost rollback"}},
		{name: "guard copy of a log storage does not hold", edit: func(st store) { write(filepath.Join(st.guard, keyDir, "ghost"), sign("ghost", 0, merkle.EmptyRoot())) }, want: []string{"ghost rollback"}},
		{name: "layout newer", edit: func(st store) {
			db, err := pebble.Open(st.dir, &pebble.Options{Logger: pebbleLogger{discard}})
			if err != nil {
				t.Fatal(err)
			}
			db.Set([]byte{kindLayout}, binary.BigEndian.AppendUint32(nil, storageLayout+1), pebble.Sync)
			db.Close()
		}, want: []string{"layout"}},
		{name: "another key", another: true, want: []string{"x checkpoint_bad", "y checkpoint_bad"}, fatal: []string{"x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store{filepath.Join(t.TempDir(), "data"), filepath.Join(t.TempDir(), "guard")}
			copyDir(t, cmpOr(tc.from, cfg.dir), st.dir)
			copyDir(t, g0, st.guard)
			if tc.edit != nil {
				tc.edit(st)
			}
			signer, verifier := cfg.signer, cfg.verifier
			if tc.another {
				signer, verifier = otherSigner, otherVerifier
			}
			before := treeContents(t, st.dir, st.guard)
			rs, err := OpenRaw(st.dir, WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			res, err := rs.CheckOpen(verifier, WithCheckpointGuardDir(st.guard))
			rs.Close()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			if res.Layout != nil {
				got = append(got, "layout")
			}
			for _, e := range res.Logs {
				got = append(got, e.Log+" "+e.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("CheckOpen reports %q, want %q: %+v", got, tc.want, res)
			}
			if after := treeContents(t, st.dir, st.guard); !mapsEqual(before, after) {
				t.Errorf("CheckOpen wrote to the store or its checkpoint dirs")
			}

			s, err := Open(st.dir, signer, verifier, WithLogger(slog.New(slog.DiscardHandler)), WithCheckpointGuardDir(st.guard))
			var re *RollbackError
			switch {
			case len(tc.want) == 0:
				if err != nil {
					t.Fatalf("CheckOpen passes the store, Open fails: %v", err)
				}
				s.Close()
			case tc.want[0] == "layout":
				if err == nil || !strings.Contains(err.Error(), "newer than this version") {
					t.Errorf("Open: %v; want the layout refused", err)
				}
			case len(tc.fatal) > 0:
				if err == nil || !slices.ContainsFunc(tc.fatal, func(l string) bool { return strings.Contains(err.Error(), "load log "+l+": ") }) {
					t.Errorf("Open: %v; want it to fail on log %s", err, tc.fatal)
				}
			case errors.As(err, &re):
				var opened []string
				for _, e := range re.Logs {
					opened = append(opened, e.Log+" "+e.Kind)
				}
				if !slices.Equal(opened, tc.want) {
					t.Errorf("Open refuses %q, CheckOpen reports %q", opened, tc.want)
				}
			default:
				t.Errorf("Open: %v; want it to refuse %q", err, tc.want)
			}
			if err == nil {
				return
			}
			// Read-only on request, the store opens for every refusal.
			if re != nil {
				s, err := Open(st.dir, signer, verifier, WithLogger(slog.New(slog.DiscardHandler)), WithCheckpointGuardDir(st.guard), WithReadOnlyOnRollback(true))
				if err != nil {
					t.Fatalf("read-only: %v", err)
				}
				s.Close()
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// treeContents reads every file under the directories.
func treeContents(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			if fi.IsDir() {
				out[p+"/"] = ""
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = fmt.Sprintf("%x %v", b, fi.Mode())
			return nil
		})
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// FuzzCheckLog feeds checkLog arbitrary checkpoint file and guard copy
// contents beside a real tree of 40 leaves and its stored checkpoint: it
// never panics, and it admits only copies that verify, that the tree
// backs and that are not ahead of it; what it publishes the tree backs.
func FuzzCheckLog(f *testing.F) {
	const size = 40
	skey, vkey, err := note.GenerateKey(rand.Reader, testKeyName)
	if err != nil {
		f.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	origin := testKeyName + "/z"
	nodes := map[merkle.NodeID]merkle.Hash{}
	rng := merkle.NewRange()
	roots := []merkle.Hash{merkle.EmptyRoot()}
	for i := range size {
		h := merkle.LeafHash([]byte{byte(i)})
		nodes[merkle.NodeID{Level: 0, Index: uint64(i)}] = h
		if err := rng.Append(h, func(id merkle.NodeID, h merkle.Hash) { nodes[id] = h }); err != nil {
			f.Fatal(err)
		}
		r, err := rng.Root()
		if err != nil {
			f.Fatal(err)
		}
		roots = append(roots, r)
	}
	r := merkle.HashReaderFunc(func(ids []merkle.NodeID) ([]merkle.Hash, error) {
		out := make([]merkle.Hash, len(ids))
		for i, id := range ids {
			h, ok := nodes[id]
			if !ok {
				return nil, fmt.Errorf("node %d/%d not stored", id.Level, id.Index)
			}
			out[i] = h
		}
		return out, nil
	})
	sign := func(n uint64, root merkle.Hash) []byte {
		b, err := merkle.Checkpoint{Origin: origin, Size: n, Root: root}.Sign(signer)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	stored := sign(30, roots[30])
	other := merkle.LeafHash([]byte("other"))
	for _, seed := range [][2][]byte{
		{sign(size, roots[size]), sign(size, roots[size])},
		{sign(30, roots[30]), nil},
		{nil, sign(size, roots[size])},
		{sign(size, roots[size]), sign(size, other)},
		{sign(12, other), sign(size, roots[size])},
		{sign(size+1, other), nil},
		{[]byte{}, []byte("garbage")},
	} {
		f.Add(seed[0], seed[1], true, false)
	}
	f.Add([]byte(nil), []byte(nil), false, true)
	f.Fuzz(func(t *testing.T, file, guard []byte, present, orphan bool) {
		if !present {
			file = nil
		}
		c := &logCheck{name: "z", origin: origin, v: verifier, held: !orphan, r: r,
			copies: []pinCopy{{what: "checkpoint file", path: "f/z", note: file}, {what: "guard copy", path: "g/z", note: guard}}}
		if !orphan {
			c.size, c.root, c.stored = size, roots[size], stored
		}
		v, err := checkLog(c)
		if err != nil {
			t.Fatalf("checkLog: %v", err)
		}
		if v.fatal != nil {
			t.Fatalf("the stored checkpoint fails: %v", v.fatal)
		}
		backed := func(cp *SignedCheckpoint) bool {
			return cp.Size <= c.size && roots[cp.Size] == cp.Root
		}
		if v.publish != nil && !backed(v.publish) {
			t.Fatalf("publishes %d/%s, which the tree does not back", v.publish.Size, v.publish.Root)
		}
		if v.bad != nil {
			return
		}
		for _, p := range c.copies {
			if p.note == nil {
				continue
			}
			cp, err := merkle.OpenCheckpoint(p.note, verifier, origin)
			if err != nil {
				t.Fatalf("admitted a %s that does not verify: %v", p.what, err)
			}
			if orphan || !backed(&SignedCheckpoint{Checkpoint: cp}) {
				t.Fatalf("admitted a %s of size %d the tree does not back", p.what, cp.Size)
			}
		}
	})
}

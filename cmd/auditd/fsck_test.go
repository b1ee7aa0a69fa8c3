package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// The fsck test store: log "pay" of 70,000 entries (past the 65,536 of an
// index chunk, so one is ingested; 273 full level-0 tiles, a full level-1
// tile) with a checkpoint every 5,000, and log "other" of 600 entries.
const (
	fsckPayTotal = 70_000
	fsckPayBatch = 5_000
)

func buildFsckStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "fsck.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)), ledger.WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fill := func(name string, total, batch int) {
		l, err := st.CreateLog(name)
		if err != nil {
			t.Fatal(err)
		}
		for next := 0; next < total; next += batch {
			es := make([]ledger.Entry, batch)
			for j := range es {
				i := next + j
				p := make([]byte, 32)
				binary.BigEndian.PutUint64(p, uint64(i))
				copy(p[8:], name)
				es[j] = ledger.Entry{ID: fmt.Sprintf("%s-%d", name, i), Payload: p, HasKey: i%3 == 0, Key: []byte(fmt.Sprint(i % 7))}
				if i%3 != 0 {
					es[j].Key = nil
				}
			}
			if _, err := l.Append(ctx, es); err != nil {
				t.Fatal(err)
			}
			if _, err := l.WaitCheckpoint(ctx, uint64(next+batch)); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill("other", 600, 200)
	fill("pay", fsckPayTotal, fsckPayBatch)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

type fsckJSON struct {
	Findings []struct {
		Check      string  `json:"check"`
		Log        string  `json:"log"`
		Index      *uint64 `json:"index"`
		Tile       string  `json:"tile"`
		Checkpoint *uint64 `json:"checkpoint"`
		Kind       string  `json:"kind"`
		Detail     string  `json:"detail"`
	} `json:"findings"`
	Logs            []string `json:"logs"`
	Entries         uint64   `json:"entries"`
	DurationSeconds *float64 `json:"duration_seconds"`
}

func runFsckBin(t *testing.T, bin string, args ...string) (int, []byte, string) {
	t.Helper()
	code, stdout, stderr := runAuditd(t, bin, append([]string{"fsck"}, args...)...)
	return code, []byte(stdout), stderr
}

// TestFsck injects one fault per copy of a real store, closed, by editing
// its Pebble directly, and runs the fsck binary on it: each fault is
// reported with its log and entry, tile or checkpoint, and kind, and
// nothing else is; a clean store exits 0.
func TestFsck(t *testing.T) {
	ctx := context.Background()
	bin := buildDaemon(t, ctx)
	clean := buildFsckStore(t)

	type edit func(t *testing.T, db *pebble.DB, id uint32)
	flipAt := func(key func(id uint32) []byte, at func(n int) int) edit {
		return func(t *testing.T, db *pebble.DB, id uint32) {
			k := key(id)
			v, closer, err := db.Get(k)
			if err != nil {
				t.Fatalf("get %x: %v", k, err)
			}
			b := bytes.Clone(v)
			closer.Close()
			b[at(len(b))] ^= 0x10
			if err := db.Set(k, b, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
	}
	entry := func(i uint64) func(uint32) []byte { return func(id uint32) []byte { return fsckKey('e', id, i) } }
	tile := func(level uint8, n uint64) func(uint32) []byte {
		return func(id uint32) []byte {
			return binary.BigEndian.AppendUint64(append(binary.BigEndian.AppendUint32([]byte{'t'}, id), level), n)
		}
	}
	const hs = 32
	cases := []struct {
		name string
		edit edit
		want []string
		// a kind the checkpoint audit may add: consistency proofs served
		// from a corrupt tile do not verify.
		mayAdd string
	}{
		{"payload byte", flipAt(entry(1000), func(n int) int { return n - 5 }),
			[]string{"scrub pay leaf_mismatch index=1000 tile=0/3"}, ""},
		{"level-0 base hash", flipAt(tile(0, 5), func(int) int { return 17*hs + 2 }),
			[]string{"scrub pay tile_mismatch tile=0/5"}, ""},
		{"level-0 mid hash", flipAt(tile(0, 6), func(int) int { return (256+3)*hs + 2 }),
			[]string{"scrub pay tile_mismatch tile=0/6"}, ""},
		{"level-1 base hash", flipAt(tile(1, 0), func(int) int { return 2*hs + 7 }),
			[]string{"scrub pay tile_mismatch tile=1/0"}, ledger.IntegrityConsistencyBad},
		{"level-1 mid hash", flipAt(tile(1, 0), func(int) int { return (256+5)*hs + 7 }),
			[]string{"scrub pay tile_mismatch tile=1/0"}, ledger.IntegrityConsistencyBad},
		{"entry key deleted in an old chunk", func(t *testing.T, db *pebble.DB, id uint32) {
			if err := db.Delete(fsckKey('e', id, 2000), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"scrub pay entry_missing index=2000"}, ""},
		{"payload deleted", func(t *testing.T, db *pebble.DB, id uint32) {
			k := fsckKey('e', id, 3000)
			v, closer, err := db.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			b := bytes.Clone(v[:len(v)-32]) // the 32-byte payload is last
			closer.Close()
			if err := db.Set(k, b, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"scrub pay leaf_mismatch index=3000 tile=0/11"}, ""},
		{"older checkpoint edited", flipAt(func(id uint32) []byte { return fsckKey('c', id, 20000) }, func(int) int { return 30 }),
			[]string{"checkpoints pay checkpoint_bad checkpoint=20000"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyStore(t, clean)
			editStore(t, dir, "pay", func(db *pebble.DB, id uint32) { tc.edit(t, db, id) })
			code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json")
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
			}
			res := parseFsck(t, out)
			var got []string
			for _, f := range res.Findings {
				if tc.mayAdd != "" && f.Check == "checkpoints" && f.Kind == tc.mayAdd && f.Log == "pay" {
					continue
				}
				got = append(got, describeFsck(f.Check, f.Log, f.Kind, f.Index, f.Tile, f.Checkpoint))
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q\n%s", got, tc.want, out)
			}
			// The same store, scoped to the other log, is clean.
			if code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--log", "other", "--json"); code != 0 {
				t.Errorf("--log other: exit %d, want 0\n%s\n%s", code, out, stderr)
			}
		})
	}

	t.Run("repair-index", func(t *testing.T) { testRepairIndexCommand(t, bin, clean) })
	t.Run("clean", func(t *testing.T) {
		dir := copyStore(t, clean)
		before := dirContents(t, dir)
		code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json")
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s\n%s", code, out, stderr)
		}
		res := parseFsck(t, out)
		if len(res.Findings) != 0 || !slices.Equal(res.Logs, []string{"other", "pay"}) || res.Entries != fsckPayTotal+600 || res.DurationSeconds == nil {
			t.Errorf("clean store: %s", out)
		}
		if !bytes.Contains(out, []byte(`"findings": []`)) {
			t.Errorf("findings is not an empty list: %s", out)
		}
		// Text mode; and fsck wrote nothing: every file is as it was.
		code, text, _ := runFsckBin(t, bin, "--data-dir", dir)
		if code != 0 || len(text) != 0 {
			t.Errorf("text mode: exit %d, output %q", code, text)
		}
		after := dirContents(t, dir)
		for name, b := range before {
			if after[name] != b {
				t.Errorf("fsck changed %s", name)
			}
		}
		for name := range after {
			if _, ok := before[name]; !ok {
				t.Errorf("fsck created %s", name)
			}
		}
	})

	t.Run("truncated WAL", func(t *testing.T) {
		dir := copyStore(t, clean)
		wals, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		if len(wals) == 0 {
			t.Fatal("no WAL in the store")
		}
		sort.Strings(wals)
		newest := wals[len(wals)-1]
		st, err := os.Stat(newest)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(newest, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json")
		switch code {
		case 2: // a store that refuses to open is reported as such
			if !strings.Contains(stderr, "auditd fsck:") {
				t.Errorf("exit 2 without an error: %s", stderr)
			}
		case 1:
			res := parseFsck(t, out)
			ok := false
			for _, f := range res.Findings {
				if f.Log == "pay" && f.Kind == ledger.IntegrityRollback {
					ok = true
				}
			}
			if !ok {
				t.Errorf("no rollback finding for pay: %s", out)
			}
		default:
			t.Errorf("exit %d after truncating %s (%d bytes) to half; want 1 (rollback) or 2\n%s\n%s", code, filepath.Base(newest), st.Size(), out, stderr)
		}
		t.Logf("truncated WAL %s of %d bytes: exit %d\n%s", filepath.Base(newest), st.Size(), code, out)
	})

	t.Run("cannot run", func(t *testing.T) {
		if code, _, stderr := runFsckBin(t, bin, "--data-dir", filepath.Join(t.TempDir(), "nothing")); code != 2 {
			t.Errorf("no store: exit %d, want 2\n%s", code, stderr)
		}
		dir := copyStore(t, clean)
		os.Remove(filepath.Join(dir, "auditd.key"))
		if code, _, stderr := runFsckBin(t, bin, "--data-dir", dir); code != 2 || !strings.Contains(stderr, "signing key") {
			t.Errorf("no key: exit %d, want 2\n%s", code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "auditd.key")); err == nil {
			t.Errorf("fsck created a key")
		}
		// With the verifier key instead, it runs.
		pub, err := os.ReadFile(filepath.Join(clean, "auditd.key.pub"))
		if err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := runFsckBin(t, bin, "--data-dir", dir, "--verifier-key", strings.TrimSpace(string(pub))); code != 0 {
			t.Errorf("--verifier-key: exit %d, want 0\n%s", code, stderr)
		}
		if code, _, _ := runFsckBin(t, bin, "--data-dir", dir, "--log", "nope"); code != 2 {
			t.Errorf("--log of no log: exit %d, want 2", code)
		}
		// A store the daemon holds (Pebble's lock) is not checked.
		k, _, err := loadOrCreateKey(filepath.Join(clean, "auditd.key"), "fsck.test")
		if err != nil {
			t.Fatal(err)
		}
		held := copyStore(t, clean)
		st, err := ledger.Open(held, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if code, _, stderr := runFsckBin(t, bin, "--data-dir", held); code != 2 {
			t.Errorf("store held by a daemon: exit %d, want 2\n%s", code, stderr)
		}
	})
}

func describeFsck(check, log, kind string, index *uint64, tile string, cp *uint64) string {
	s := check + " " + log + " " + kind
	if index != nil {
		s += fmt.Sprintf(" index=%d", *index)
	}
	if tile != "" {
		s += " tile=" + tile
	}
	if cp != nil {
		s += fmt.Sprintf(" checkpoint=%d", *cp)
	}
	return s
}

func parseFsck(t *testing.T, out []byte) fsckJSON {
	t.Helper()
	var res fsckJSON
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("fsck --json output: %v\n%s", err, out)
	}
	return res
}

func fsckKey(kind byte, id uint32, n uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32([]byte{kind}, id), n)
}

func copyStore(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editStore opens a closed store's Pebble directly and runs fn with the
// id of the named log (ledger/keys.go: name key 'n' name -> u32 id).
func editStore(t *testing.T, dir, log string, fn func(db *pebble.DB, id uint32)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(append([]byte{'n'}, log...))
	if err != nil {
		t.Fatal(err)
	}
	id := binary.BigEndian.Uint32(v)
	closer.Close()
	fn(db, id)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// dirContents reads every file of a store directory.
func dirContents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestFsckOpenChecks (issue 26, item 5): fsck runs the checks serve runs
// when it opens the ledger, and "fsck clean" means "serve starts". Each
// case edits a copy of a stopped daemon's data dir as a hand, a script or
// a restore could (its checkpoint file of log pay, 70,000 entries, or a
// file for a log storage does not hold, the layout marker, the key): fsck
// exits 1 with a finding of check "open" naming the log, and serve refuses
// to start, naming it too. The clean copy passes fsck, and serve starts on
// it. Before the fix fsck passed every edited copy that serve refused.
func TestFsckOpenChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	clean := buildFsckStore(t)
	k, _, err := loadOrCreateKey(filepath.Join(clean, "auditd.key"), "fsck.test")
	if err != nil {
		t.Fatal(err)
	}
	sign := func(log string, size uint64, root merkle.Hash) []byte {
		n, err := merkle.Checkpoint{Origin: k.signer.Name() + "/" + log, Size: size, Root: root}.Sign(k.signer)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	otherRoot := merkle.LeafHash([]byte("another history"))
	write := func(name string, b []byte) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "checkpoints", name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name      string
		edit      func(t *testing.T, dir string)
		log, kind string // the finding; log "" for the whole store
		says      string // serve's refusal and the finding's detail say this
	}{
		{"byte flipped", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "checkpoints", "pay")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len("fsck.test/pay\n70000\n")+3] ^= 0x01 // in the root
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "pay", ledger.IntegrityCheckpointBad, "does not hold a checkpoint of this log signed by this key"},
		{"another root, signed", write("pay", sign("pay", fsckPayTotal, otherRoot)), "pay", ledger.IntegrityRollback, "inconsistent"},
		{"another root at an older size", write("pay", sign("pay", 5000, otherRoot)), "pay", ledger.IntegrityRollback, "inconsistent"},
		{"ahead of storage", write("pay", sign("pay", fsckPayTotal+1000, otherRoot)), "pay", ledger.IntegrityRollback, "1000 signed entries are lost"},
		{"truncated to 0 bytes", write("pay", nil), "pay", ledger.IntegrityCheckpointBad, "does not hold a checkpoint"},
		{"a log storage does not hold", write("ghost", sign("ghost", 3, otherRoot)), "ghost", ledger.IntegrityRollback, "no log ghost at all"},
		{"layout newer", func(t *testing.T, dir string) {
			db, err := pebble.Open(dir, &pebble.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Set([]byte{'v'}, binary.BigEndian.AppendUint32(nil, 99), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}, "", "layout", "storage layout 99 is newer"},
		{"another key", func(t *testing.T, dir string) {
			for _, f := range []string{"auditd.key", "auditd.key.pub"} {
				os.Remove(filepath.Join(dir, f))
			}
			if err := writeNewKey(filepath.Join(dir, "auditd.key"), "fsck.test"); err != nil {
				t.Fatal(err)
			}
		}, "other", ledger.IntegrityCheckpointBad, "does not verify"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyStore(t, clean)
			tc.edit(t, dir)
			keyMode600(t, dir)
			guard := t.TempDir()
			code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json", "--quiet", "--checkpoint-guard-dir", guard)
			if code != 1 {
				t.Errorf("fsck: exit %d, want 1\n%s\n%s", code, out, stderr)
			}
			if code == 1 || code == 0 {
				var open []string
				found := false
				for _, f := range parseFsck(t, out).Findings {
					if f.Check != "open" {
						continue
					}
					open = append(open, f.Log+" "+f.Kind)
					if f.Log == tc.log && f.Kind == tc.kind && strings.Contains(f.Detail, tc.says) {
						found = true
					}
				}
				if !found {
					t.Errorf("fsck's open findings %q; want %q %s saying %q\n%s", open, tc.log, tc.kind, tc.says, out)
				}
			}
			d, err := startDaemonArgs(ctx, bin, 0, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0",
				"--log-format", "text", "--checkpoint-guard-dir", guard)
			if err == nil {
				d.stop(ctx)
				t.Fatalf("serve started on the copy fsck reports")
			}
			<-d.exited
			stderr = strings.Join(d.stderr.lines(), "\n")
			if !strings.Contains(stderr, tc.log) || !strings.Contains(stderr, tc.says) {
				t.Errorf("serve's refusal does not name %q and say %q:\n%s", tc.log, tc.says, stderr)
			}
		})
	}
	t.Run("clean", func(t *testing.T) {
		dir := copyStore(t, clean)
		keyMode600(t, dir)
		guard := t.TempDir()
		for run := range 2 { // before serve made the guard copies, and after
			if code, out, stderr := runFsckBin(t, bin, "--data-dir", dir, "--json", "--quiet", "--checkpoint-guard-dir", guard); code != 0 {
				t.Fatalf("fsck run %d: exit %d, want 0\n%s\n%s", run, code, out, stderr)
			}
			d, err := startDaemonArgs(ctx, bin, run, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0",
				"--log-format", "text", "--checkpoint-guard-dir", guard)
			if err != nil {
				t.Fatalf("serve on the copy fsck passes: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
			}
			if err := d.stop(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// keyMode600 gives a copied store's key the mode serve asks of it
// (os.CopyFS makes files 0644).
func keyMode600(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(filepath.Join(dir, "auditd.key"), 0o600); err != nil {
		t.Fatal(err)
	}
}

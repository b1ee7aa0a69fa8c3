package checkers_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

type testKey struct {
	signer   note.Signer
	verifier note.Verifier
	vkey     string
}

func newKey(t testing.TB) testKey {
	k := ledgertest.NewKey(t, "checkers.example")
	return testKey{k.Signer, k.Verifier, k.VKey}
}

// open opens (or reopens) the store in dir signed by k, closed when the
// test ends.
func (k testKey) open(t testing.TB, dir string, opts ...ledger.Option) *ledger.Store {
	t.Helper()
	return ledgertest.Open(t, ledgertest.WithDir(dir),
		ledgertest.WithKey(ledgertest.Key{Signer: k.signer, Verifier: k.verifier, VKey: k.vkey}), ledgertest.WithLedger(opts...))
}

func quiet() ledger.Option { return ledger.WithLogger(slog.New(slog.DiscardHandler)) }

// testEntry is entry i of the test logs: a payload of n bytes that differs
// by entry, a key on every other entry, a source position on every third.
func testEntry(i, n int) ledger.Entry {
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i*31 + j*7)
	}
	binary.BigEndian.PutUint64(p, uint64(i))
	e := ledger.Entry{ID: fmt.Sprintf("ev-%d", i), Payload: p}
	if i%2 == 0 {
		e.HasKey, e.Key = true, []byte(fmt.Sprintf("k%d", i%97))
	}
	return e
}

// fillLog appends total entries of payload bytes to the named log in
// requests of batch entries, each followed by a checkpoint.
func fillLog(t testing.TB, st *ledger.Store, name string, total, batch, payload int) {
	t.Helper()
	l, err := st.CreateLog(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for next := 0; next < total; {
		n := min(batch, total-next)
		es := make([]ledger.Entry, n)
		for j := range es {
			es[j] = testEntry(next+j, payload)
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
		next += n
		if _, err := l.WaitCheckpoint(ctx, uint64(next)); err != nil {
			t.Fatal(err)
		}
	}
}

// collector is a Progress that keeps what it is told.
type collector struct {
	mu       sync.Mutex
	findings []checkers.Finding
	entries  int
}

func (c *collector) Checked(ctx context.Context, n int) error {
	c.mu.Lock()
	c.entries += n
	c.mu.Unlock()
	return ctx.Err()
}

func (c *collector) Found(f checkers.Finding) {
	c.mu.Lock()
	c.findings = append(c.findings, f)
	c.mu.Unlock()
}

// checkAll runs the scrub and the checkpoint audit over src.
func checkAll(t testing.TB, src checkers.Source, v note.Verifier) *collector {
	t.Helper()
	c := &collector{}
	for _, ch := range []checkers.Checker{checkers.NewScrub(src, v), checkers.NewCheckpointAudit(src, v)} {
		if err := ch.Run(context.Background(), c); err != nil {
			t.Fatalf("%s: %v", ch.Name(), err)
		}
	}
	return c
}

// checkRaw opens dir with ledger.OpenRaw and runs checkAll.
func checkRaw(t testing.TB, dir string, v note.Verifier) *collector {
	t.Helper()
	rs, err := ledger.OpenRaw(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	return checkAll(t, checkers.RawSource(rs), v)
}

// copyDir copies a closed store.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir() + "/store"
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editPebble opens a closed store's Pebble directly and runs fn on it.
func editPebble(t testing.TB, dir string, fn func(db *pebble.DB, id uint32)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(append([]byte{'n'}, "pay"...))
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

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

func entryKey(id uint32, i uint64) []byte {
	k := binary.BigEndian.AppendUint32([]byte{'e'}, id)
	return binary.BigEndian.AppendUint64(k, i)
}

func tileKey(id uint32, level uint8, n uint64) []byte {
	k := append(binary.BigEndian.AppendUint32([]byte{'t'}, id), level)
	return binary.BigEndian.AppendUint64(k, n)
}

func checkpointKey(id uint32, size uint64) []byte {
	k := binary.BigEndian.AppendUint32([]byte{'c'}, id)
	return binary.BigEndian.AppendUint64(k, size)
}

// flip flips one byte of the value at key.
func flip(t testing.TB, db *pebble.DB, key []byte, at func(n int) int) {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("get %x: %v", key, err)
	}
	b := append([]byte(nil), v...)
	closer.Close()
	b[at(len(b))] ^= 0x40
	if err := db.Set(key, b, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

var tempDirs []string

// makeTempDir makes a directory that lives until the test binary exits, for
// stores shared by several tests.
func makeTempDir() (string, error) {
	d, err := os.MkdirTemp("", "checkers-test-")
	if err == nil {
		tempDirs = append(tempDirs, d)
	}
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

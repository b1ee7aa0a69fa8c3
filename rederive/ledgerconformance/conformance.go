// Package ledgerconformance is the conformance suite of the rederive.Ledger
// contract, run against every implementation: the local store
// (rederive.LocalLedger) and a remote auditd over HTTP
// (rederive.RemoteLedger against a real api.Server).
package ledgerconformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

// The suite's logs: BigLog holds BigSize entries (past the engine's
// 1,024-entry read batch and a remote page of 1,000), SmallLog SmallSize,
// and EmptyLog none.
const (
	BigLog    = "orders.0"
	BigSize   = 2500
	SmallLog  = "orders.1"
	SmallSize = 3
	EmptyLog  = "empty"
)

// Fixture is the ledger the suite fills, for the opener to wrap: the
// store, its verifier key (a note verifier key line) and verifier.
type Fixture struct {
	Store       *ledger.Store
	VerifierKey string
	Verifier    note.Verifier
}

// Run checks the Ledger contract: open wraps the suite's ledger (filled
// with its logs, every entry under a signed checkpoint) in the
// implementation under test.
func Run(t *testing.T, open func(t *testing.T, f Fixture) rederive.Ledger) {
	f := newFixture(t)
	lg := open(t, f)
	t.Run("Logs", func(t *testing.T) { testLogs(t, lg) })
	t.Run("Pin", func(t *testing.T) { testPin(t, lg, f) })
	t.Run("Entries", func(t *testing.T) { testEntries(t, lg, f) })
	t.Run("EntriesStop", func(t *testing.T) { testEntriesStop(t, lg) })
	t.Run("EntriesCancelled", func(t *testing.T) { testEntriesCancelled(t, lg) })
	t.Run("Prove", func(t *testing.T) { testProve(t, lg, f) })
}

func testLogs(t *testing.T, lg rederive.Ledger) {
	ctx := context.Background()
	logs, err := lg.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{BigLog, SmallLog, EmptyLog} {
		if !slices.Contains(logs, want) {
			t.Errorf("Logs() = %v, missing %s", logs, want)
		}
	}
}

func testPin(t *testing.T, lg rederive.Ledger, f Fixture) {
	ctx := context.Background()
	for _, c := range []struct {
		log  string
		size uint64
	}{{BigLog, BigSize}, {SmallLog, SmallSize}} {
		p := pin(t, lg, c.log)
		if p.Log != c.log || p.Size != c.size || p.Checkpoint == "" {
			t.Errorf("Pin(%s) = %+v, want size %d with its checkpoint", c.log, p, c.size)
		}
		l, _ := f.Store.Log(c.log)
		if root, err := l.RootAt(c.size); err != nil || root != p.Root {
			t.Errorf("Pin(%s).Root = %x, the tree's is %x (%v)", c.log, p.Root, root, err)
		}
		if _, err := note.Open([]byte(p.Checkpoint), note.VerifierList(f.Verifier)); err != nil {
			t.Errorf("Pin(%s).Checkpoint does not verify: %v", c.log, err)
		}
	}
	// An empty log has no checkpoint of entries: none, or size 0.
	if p, ok, err := lg.Pin(ctx, EmptyLog); err != nil || ok && p.Size != 0 {
		t.Errorf("Pin(%s) = %+v, %v, %v; want none or size 0", EmptyLog, p, ok, err)
	}
}

func testEntries(t *testing.T, lg rederive.Ledger, f Fixture) {
	p := pin(t, lg, BigLog)
	l, _ := f.Store.Log(BigLog)
	r := lg.Reader(BigLog, p)
	if r.Name() != BigLog {
		t.Errorf("Reader.Name() = %q", r.Name())
	}
	// Whole, and ranges that neither start at 0 nor align with a
	// batch or a page.
	for _, rg := range [][2]uint64{{0, BigSize}, {1, 2}, {999, 1001}, {1023, 2049}, {1500, BigSize}, {7, 7}} {
		recs, err := read(r, rg[0], rg[1])
		if err != nil {
			t.Fatalf("Entries[%d, %d): %v", rg[0], rg[1], err)
		}
		if uint64(len(recs)) != rg[1]-rg[0] {
			t.Fatalf("Entries[%d, %d): %d records", rg[0], rg[1], len(recs))
		}
		for i, rec := range recs {
			checkRecord(t, l, rec, rg[0]+uint64(i))
		}
	}
}

func testEntriesStop(t *testing.T, lg rederive.Ledger) {
	ctx := context.Background()
	p := pin(t, lg, BigLog)
	stop := errors.New("stop")
	n := 0
	err := lg.Reader(BigLog, p).Entries(ctx, 0, BigSize, func(*ledger.Record) error {
		if n++; n == 1100 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 1100 {
		t.Errorf("an error from fn: got %v after %d records, want it back after 1100", err, n)
	}
}

func testEntriesCancelled(t *testing.T, lg rederive.Ledger) {
	ctx := context.Background()
	p := pin(t, lg, BigLog)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := lg.Reader(BigLog, p).Entries(cctx, 0, BigSize, func(*ledger.Record) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Entries with a cancelled context: %v", err)
	}
}

func testProve(t *testing.T, lg rederive.Ledger, f Fixture) {
	ctx := context.Background()
	p := pin(t, lg, BigLog)
	l, _ := f.Store.Log(BigLog)
	for _, i := range []uint64{0, 1, 1023, 1024, BigSize - 1} {
		proof, err := lg.Prove(ctx, BigLog, i, p)
		if err != nil {
			t.Fatalf("Prove(%d): %v", i, err)
		}
		rec, err := l.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkle.VerifyInclusion(i, p.Size, rec.LeafHash, proof, p.Root); err != nil {
			t.Errorf("Prove(%d) does not verify: %v", i, err)
		}
	}
	// A pin whose root is not the tree's: the proof does not check out.
	bad := p
	bad.Root[0] ^= 1
	if _, err := lg.Prove(ctx, BigLog, 5, bad); !errors.Is(err, rederive.ErrVerification) {
		t.Errorf("Prove against a wrong root: %v, want ErrVerification", err)
	}
}

// newFixture opens a ledger in a temporary directory with the suite's
// logs, every entry signed.
func newFixture(t *testing.T) Fixture {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "ledgerconformance.example")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	quiet := slog.New(slog.DiscardHandler)
	st, err := ledger.Open(t.TempDir(), signer, verifier, ledger.WithCheckpointInterval(5*time.Millisecond), ledger.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the ledger: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, lg := range []struct {
		name string
		size int
	}{{BigLog, BigSize}, {SmallLog, SmallSize}, {EmptyLog, 0}} {
		l, err := st.CreateLog(lg.name)
		if err != nil {
			t.Fatal(err)
		}
		for start := 0; start < lg.size; start += 1000 {
			var es []ledger.Entry
			for i := start; i < min(start+1000, lg.size); i++ {
				es = append(es, entry(i))
			}
			if _, err := l.Append(ctx, es); err != nil {
				t.Fatal(err)
			}
		}
		if lg.size > 0 {
			if _, err := l.WaitCheckpoint(ctx, uint64(lg.size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return Fixture{Store: st, VerifierKey: vkey, Verifier: verifier}
}

var t0 = time.Unix(1_700_000_000, 0)

// entry is the suite's entry i of every log.
func entry(i int) ledger.Entry {
	return ledger.Entry{ID: fmt.Sprintf("e-%d", i), HasKey: true, Key: fmt.Appendf(nil, "k%d", i%11),
		Time: t0.Add(time.Duration(i) * time.Second), Payload: fmt.Appendf(nil, `{"n":%d}`, i), PayloadJSON: true}
}

// checkRecord checks that rec is the suite's entry index, and that its
// leaf hash is the one l holds.
func checkRecord(t *testing.T, l *ledger.Log, rec ledger.Record, index uint64) {
	t.Helper()
	want := entry(int(index))
	if rec.Index != index || rec.Leaf.ID != want.ID || !bytes.Equal(rec.Payload, want.Payload) ||
		!bytes.Equal(rec.Leaf.Key, want.Key) || rec.Leaf.Time != want.Time.UnixNano() {
		t.Fatalf("record %d: index %d id %q key %q time %d payload %s", index, rec.Index, rec.Leaf.ID, rec.Leaf.Key, rec.Leaf.Time, rec.Payload)
	}
	if stored, err := l.Entry(index); err != nil || stored.LeafHash != rec.LeafHash {
		t.Fatalf("record %d: leaf hash %v, the ledger's is %v (%v)", index, rec.LeafHash, stored.LeafHash, err)
	}
}

func pin(t *testing.T, lg rederive.Ledger, log string) fold.Pin {
	t.Helper()
	p, ok, err := lg.Pin(context.Background(), log)
	if err != nil || !ok {
		t.Fatalf("Pin(%s): %v, %v", log, ok, err)
	}
	return p
}

// read reads [from, to) and returns the records, copied.
func read(r fold.LogReader, from, to uint64) ([]ledger.Record, error) {
	var out []ledger.Record
	err := r.Entries(context.Background(), from, to, func(rec *ledger.Record) error {
		c := *rec
		c.Payload = bytes.Clone(rec.Payload)
		out = append(out, c)
		return nil
	})
	return out, err
}

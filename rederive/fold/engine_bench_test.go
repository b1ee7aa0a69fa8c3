package fold_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

const (
	foldBenchEvents   = 1_000_000
	foldBenchAccounts = 100_000
)

var (
	foldBenchOnce  sync.Once
	foldBenchStore *ledger.Store
	foldBenchErr   error
)

// foldBenchLog returns a log of foldBenchEvents ~200-byte JSON payments
// over foldBenchAccounts accounts. It is built once, in a directory under
// os.TempDir() that later runs reuse (delete it to rebuild), and stays open
// until the process ends.
func foldBenchLog(b *testing.B) *ledger.Log {
	b.Helper()
	foldBenchOnce.Do(func() { foldBenchStore, foldBenchErr = openFoldBench() })
	if foldBenchErr != nil {
		b.Fatal(foldBenchErr)
	}
	l, err := foldBenchStore.Log("payments.0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func openFoldBench() (*ledger.Store, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("auditd-rederive-bench-%d", foldBenchEvents))
	keys, err := os.ReadFile(filepath.Join(dir, "key"))
	_, doneErr := os.Stat(filepath.Join(dir, "done"))
	fresh := err != nil || doneErr != nil
	if fresh {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		skey, vkey, err := note.GenerateKey(rand.Reader, "rederive-bench.example")
		if err != nil {
			return nil, err
		}
		keys = []byte(skey + "\n" + vkey)
		if err := os.WriteFile(filepath.Join(dir, "key"), keys, 0o600); err != nil {
			return nil, err
		}
	}
	skey, vkey, _ := strings.Cut(string(keys), "\n")
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	s, err := ledger.Open(filepath.Join(dir, "db"), signer, verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if !fresh {
		return s, nil
	}
	l, err := s.CreateLog("payments.0")
	if err != nil {
		return nil, err
	}
	const chunk = 8192
	t0 := time.Unix(1_740_000_000, 0)
	for i := 0; i < foldBenchEvents; i += chunk {
		es := make([]ledger.Entry, 0, chunk)
		for j := i; j < min(i+chunk, foldBenchEvents); j++ {
			id, p := foldBenchPayment(j)
			es = append(es, ledger.Entry{ID: id, Time: t0.Add(time.Duration(j) * time.Millisecond), Payload: p, PayloadJSON: true})
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			return nil, err
		}
	}
	if _, err := l.WaitCheckpoint(context.Background(), foldBenchEvents); err != nil {
		return nil, err
	}
	return s, os.WriteFile(filepath.Join(dir, "done"), nil, 0o644)
}

// foldBenchPayment returns the id and the payload (about 200 bytes) of the
// jth benchmark payment.
func foldBenchPayment(j int) (string, []byte) {
	id := fmt.Sprintf("pay-%08d", j)
	return id, fmt.Appendf(nil, `{"id":%q,"type":"payment","account":"acct-%06d","amount":%d,"currency":"EUR","memo":"invoice %d settlement","created":"2025-03-01T12:%02d:00Z","tags":["sepa","batch-7"]}`,
		id, (j*7919)%foldBenchAccounts, 100+j%9000, j, j%60)
}

// memLog is a LogReader over records in memory: folding it measures the
// engine and the derivation without the ledger's reads.
type memLog struct {
	name string
	recs []*ledger.Record
}

func (m *memLog) Name() string { return m.name }

func (m *memLog) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	for _, r := range m.recs[from:to] {
		if err := fn(r); err != nil {
			return err
		}
	}
	return ctx.Err()
}

var (
	foldMemOnce sync.Once
	foldMem     *memLog
)

// foldBenchMemLog holds the benchmark's payments in memory.
func foldBenchMemLog() *memLog {
	foldMemOnce.Do(func() {
		m := &memLog{name: "payments.0", recs: make([]*ledger.Record, foldBenchEvents)}
		t0 := time.Unix(1_740_000_000, 0).UnixNano()
		for j := range m.recs {
			id, p := foldBenchPayment(j)
			r := &ledger.Record{Index: uint64(j), Payload: p, PayloadJSON: true}
			r.Leaf = merkle.Leaf{Log: m.name, ID: id, Time: t0 + int64(j)*int64(time.Millisecond)}
			r.LeafHash = merkle.Hash{byte(j), byte(j >> 8), byte(j >> 16)}
			m.recs[j] = r
		}
		foldMem = m
	})
	return foldMem
}

// foldBenchCELSpec is a CEL sum by account.
const foldBenchCELSpec = `
derivations:
  - name: balances
    sources: [payments.*]
    filter: event.type == "payment"
    key: event.account
    initial: "0"
    step: state + event.amount
    store:
      file: {path: balances.jsonl}
`

// noopDerivation prepares nothing: a fold with it measures reading.
type noopDerivation struct{ fold.GoBalances }

func (*noopDerivation) Prepare(*fold.Event) ([]string, any, error) { return nil, nil, nil }

// BenchmarkFold folds 1,000,000 payments over 100,000 accounts in one log
// with the Go derivation, a CEL sum by key, and a derivation that reads
// and prepares nothing; from the ledger, and from records in memory (the
// engine and the derivation alone). entries is the baseline: the log read
// by one goroutine.
func BenchmarkFold(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a ledger of 1,000,000 entries")
	}
	l := foldBenchLog(b)
	size := l.Size()
	spans := []fold.Span{{Reader: fold.LocalLog(l), To: size, Pin: fold.Pin{Log: l.Name(), Size: size}}}
	specs, err := spec.Parse("bench.yaml", []byte(foldBenchCELSpec))
	if err != nil {
		b.Fatal(err)
	}
	cel, err := spec.Compile(specs[0])
	if err != nil {
		b.Fatal(err)
	}
	// The baseline: one goroutine reading the log.
	b.Run("entries", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := foldCPUTime()
		for b.Loop() {
			if err := l.Entries(context.Background(), 0, size, func(*ledger.Record) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		reportFoldRate(b, size, cpu0)
	})
	memSpans := func() []fold.Span {
		mem := foldBenchMemLog()
		return []fold.Span{{Reader: mem, To: foldBenchEvents, Pin: fold.Pin{Log: mem.name, Size: foldBenchEvents}}}
	}
	ledgerSpans := func() []fold.Span { return spans }
	for _, c := range []struct {
		name  string
		d     fold.Derivation
		keys  int
		spans func() []fold.Span
	}{
		{"ledger/read", &noopDerivation{}, 0, ledgerSpans},
		{"ledger/go", &fold.GoBalances{}, foldBenchAccounts, ledgerSpans},
		{"ledger/cel", cel, foldBenchAccounts, ledgerSpans},
		{"memory/go", &fold.GoBalances{}, foldBenchAccounts, memSpans},
		{"memory/cel", cel, foldBenchAccounts, memSpans},
	} {
		for _, w := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, w), func(b *testing.B) {
				spans := c.spans()
				b.ReportAllocs()
				cpu0 := foldCPUTime()
				for b.Loop() {
					r, err := fold.Fold(context.Background(), c.d, nil, spans, fold.Options{Workers: w})
					if err != nil {
						b.Fatal(err)
					}
					if r.Events != size || len(r.States) != c.keys {
						b.Fatalf("%d events, %d keys", r.Events, len(r.States))
					}
				}
				reportFoldRate(b, size, cpu0)
			})
		}
	}
}

// reportFoldRate reports events/s, and the CPU time the process spent per
// event (on Linux): on a busy machine the rate understates what the fold
// does on idle cores, the CPU time much less so.
func reportFoldRate(b *testing.B, events uint64, cpu0 time.Duration) {
	n := float64(events) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "events/s")
	if cpu := foldCPUTime(); cpu > 0 && cpu0 > 0 {
		b.ReportMetric(float64(cpu-cpu0)/n, "cpu-ns/event")
	}
}

// foldCPUTime returns the user and system CPU time of the process, read
// from /proc (0 where there is none).
func foldCPUTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name (in parentheses): utime and
	// stime are the 12th and 13th, in clock ticks (USER_HZ, 100).
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}

// BenchmarkResult saves and loads a result of 1,000,000 keys.
func BenchmarkResult(b *testing.B) {
	if testing.Short() {
		b.Skip("1,000,000 keys")
	}
	const keys = 1_000_000
	d := &fold.GoBalances{}
	r := &fold.Result{Derivation: d.Name(), Pins: []fold.Pin{{Log: "payments.0", Size: 5 * keys}},
		States: make(map[string]fold.State, keys), Newest: make(map[string]fold.EventRef, keys)}
	for i := range keys {
		k := fmt.Sprintf("acct-%07d", i)
		r.States[k] = fold.GoBalance{Sum: int64(i) * 31, Count: int64(i % 17)}
		r.Newest[k] = fold.EventRef{Log: "payments.0", Index: uint64(i) * 5, ID: fmt.Sprintf("pay-%08d", i*5),
			Time: time.Unix(1_740_000_000, int64(i)).UTC(), LeafHash: merkle.Hash{byte(i), byte(i >> 8)}}
	}
	s := fold.OpenFoldStore(b, b.TempDir())
	bucket, err := s.Bucket("rederive")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("save", func(b *testing.B) {
		for b.Loop() {
			if err := fold.SaveResult(bucket, d, r); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(keys)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
	if err := fold.SaveResult(bucket, d, r); err != nil {
		b.Fatal(err)
	}
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			got, err := fold.LoadResult(bucket, d)
			if err != nil {
				b.Fatal(err)
			}
			if len(got.States) != keys {
				b.Fatalf("%d keys", len(got.States))
			}
		}
		b.ReportMetric(float64(keys)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
}

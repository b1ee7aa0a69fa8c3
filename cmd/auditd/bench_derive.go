package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	rspec "github.com/auditd/auditd/rederive/spec"
	rstore "github.com/auditd/auditd/rederive/store"
)

const benchDeriveUsage = `Usage: auditd bench derive [flags]

Measures a derivation check end to end: a sum of amounts by account, in
CEL, folded over a ledger log of JSON payment events and compared with a
PostgreSQL table of the balances.

The load phase (timed, outside the targets) appends -events events of
about 200 bytes to the log "payments" of a ledger in -data-dir, waits for
the checkpoint that covers them, and writes the expected balance of each
account to the table bench_balances. The verify phase runs the derivation
check (rederive.Runner.Run, a full fold and the comparison) and reports its
time, fold events/s, compare rows/s, the state (it must be clean) and the
peak resident set, against the targets. With -split it then times Fold and
Compare apart, and the parts under them (reading the log, preparing events,
scanning the table), to show where the time goes.

The peak resident set is VmHWM, reset before the verify phase where Linux
allows it (/proc/self/clear_refs). To keep the load phase out of it in any
case, load once and verify in a fresh process:

  auditd bench derive -phase load -data-dir /tmp/derive
  auditd bench derive -phase verify -data-dir /tmp/derive

Events are a pure function of -seed and their index, so a data directory
is reused (with -reuse, or -phase verify) only when its manifest records
the same -events, -keys and -seed.

`

const (
	deriveLog      = "payments"
	deriveTable    = "bench_balances"
	deriveManifest = "bench-derive.json"
	deriveEventLen = 200 // bytes of each event's JSON payload
)

// Targets of the issue, checked on the summary.
const (
	deriveTargetSeconds    = 60.0
	deriveTargetFoldRate   = 500_000.0
	deriveTargetCompRate   = 500_000.0
	deriveTargetPeakRSS    = 2 << 30
	deriveTargetEventCount = 10_000_000
)

// deriveSpec is the derivation checked. %s is the DSN as a YAML (JSON)
// string.
const deriveSpec = `derivations:
  - name: bench_balances
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + event.amount
    grace: 0s
    confirm_runs: 1
    error_budget: 0
    store:
      postgres:
        dsn: %s
        query: SELECT account, balance FROM bench_balances
`

type benchDeriveFlags struct {
	events     int
	keys       int
	seed       uint64
	dir        string
	keep       bool
	reuse      bool
	pg         string
	workers    int
	producers  int
	batch      int
	phase      string
	split      bool
	cpuProfile string
	memProfile string
	jsonOut    string
	set        map[string]bool // flags given on the command line
}

// deriveManifestFile records a completed load in its data directory.
type deriveManifestFile struct {
	Events int    `json:"events"`
	Keys   int    `json:"keys"`
	Seed   uint64 `json:"seed"`
	// Accounts is the number of accounts with at least one event: the
	// rows of the table. Total is the sum of every amount.
	Accounts int   `json:"accounts"`
	Total    int64 `json:"total"`
	// NoteKey and VerifierKey are the keys of the ledger's checkpoints.
	NoteKey     string `json:"note_key"`
	VerifierKey string `json:"verifier_key"`
}

func benchDerive(args []string) error {
	f := benchDeriveFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("bench derive", flag.ContinueOnError)
	fs.IntVar(&f.events, "events", deriveTargetEventCount, "events in the log")
	fs.IntVar(&f.keys, "keys", 1_000_000, "accounts the events are spread over")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the events' accounts, amounts and memos")
	fs.StringVar(&f.dir, "data-dir", "", "ledger data directory (default: a temporary one, removed after unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary data directory")
	fs.BoolVar(&f.reuse, "reuse", false, "reuse the load of -data-dir (and the table) when it matches, instead of loading")
	fs.StringVar(&f.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN of the derived store")
	fs.IntVar(&f.workers, "workers", 0, "Runner workers (0: GOMAXPROCS)")
	fs.IntVar(&f.producers, "producers", 4, "load: concurrent appenders")
	fs.IntVar(&f.batch, "batch", 1000, "load: events per append")
	fs.StringVar(&f.phase, "phase", "all", "load, verify or all")
	fs.BoolVar(&f.split, "split", true, "verify: after the end-to-end run, time Fold, Compare and their parts apart")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the end-to-end run to this file")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a heap profile to this file: with -split when the folded states and the expected values are live (the peak), else after the run")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchDeriveUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("bench derive: unexpected argument %q", fs.Arg(0))
	case f.phase != "load" && f.phase != "verify" && f.phase != "all":
		return fmt.Errorf("bench derive: -phase %q: want load, verify or all", f.phase)
	case f.events < 1 || f.keys < 1 || f.producers < 1 || f.batch < 1 || f.workers < 0:
		return errors.New("bench derive: -events, -keys, -producers and -batch must be positive, -workers not negative")
	case f.phase == "verify" && f.dir == "":
		return errors.New("bench derive: -phase verify needs the -data-dir of a load")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir := f.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "auditd-bench-derive-")
		if err != nil {
			return err
		}
		dir = d
		if f.keep || f.phase == "load" {
			fmt.Printf("derive: data in %s (kept)\n", dir)
		} else {
			defer os.RemoveAll(dir)
		}
	}
	res := map[string]any{"mode": "derive", "cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	st, m, err := deriveSetup(ctx, dir, &f, res)
	if err != nil {
		return err
	}
	defer st.Close()
	if f.phase != "load" {
		if err := deriveVerify(ctx, st, f, m, res); err != nil {
			return err
		}
	} else {
		fmt.Printf("derive: loaded; verify with: auditd bench derive -phase verify -data-dir %s\n", dir)
	}
	if f.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		return os.WriteFile(f.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// deriveSetup opens the ledger of dir, loading it first unless a matching
// load is there to reuse, and makes sure the table holds the expected
// balances.
func deriveSetup(ctx context.Context, dir string, f *benchDeriveFlags, res map[string]any) (*ledger.Store, *deriveManifestFile, error) {
	m, err := readDeriveManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	if m != nil && (f.reuse || f.phase == "verify") {
		// Adopt the load's sizes unless the command line names others.
		if !f.set["events"] {
			f.events = m.Events
		}
		if !f.set["keys"] {
			f.keys = m.Keys
		}
		if !f.set["seed"] {
			f.seed = m.Seed
		}
		if m.Events != f.events || m.Keys != f.keys || m.Seed != f.seed {
			return nil, nil, fmt.Errorf("bench derive: %s holds a load of %d events, %d keys, seed %d, not %d, %d, %d",
				dir, m.Events, m.Keys, m.Seed, f.events, f.keys, f.seed)
		}
	}
	reuse := m != nil && (f.reuse || f.phase == "verify")
	if !reuse {
		if f.phase == "verify" {
			return nil, nil, fmt.Errorf("bench derive: %s holds no completed load (no %s): run -phase load first", dir, deriveManifest)
		}
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			return nil, nil, fmt.Errorf("bench derive: %s is not empty: pass -reuse to reuse its load, or name an empty or new directory", dir)
		}
	}

	t0 := time.Now()
	sums, counts := deriveExpected(*f)
	accounts, total := 0, int64(0)
	for i, c := range counts {
		if c > 0 {
			accounts++
			total += sums[i]
		}
	}
	res["events"], res["keys"], res["accounts"] = f.events, f.keys, accounts
	fmt.Printf("derive: %d events over %d keys (%d with events), seed %d; expected balances computed in %.2fs\n",
		f.events, f.keys, accounts, f.seed, time.Since(t0).Seconds())

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if reuse {
		if m.Accounts != accounts || m.Total != total {
			return nil, nil, fmt.Errorf("bench derive: %s: the manifest's totals (%d accounts, %d) are not this build's (%d, %d)", dir, m.Accounts, m.Total, accounts, total)
		}
		signer, verifier, err := deriveKeys(m)
		if err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		st, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(quiet))
		if err != nil {
			return nil, nil, err
		}
		l, err := st.Log(deriveLog)
		if err == nil && (l.Checkpoint() == nil || l.Checkpoint().Size != uint64(f.events)) {
			err = fmt.Errorf("bench derive: %s: log %s is not checkpointed at %d entries", dir, deriveLog, f.events)
		}
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		res["open_seconds"] = time.Since(t0).Seconds()
		fmt.Printf("derive: reusing %s: ledger opened in %.2fs\n", dir, time.Since(t0).Seconds())
		ok, err := deriveTableMatches(ctx, f.pg, accounts, total)
		if err != nil {
			st.Close()
			return nil, nil, err
		}
		if !ok {
			fmt.Printf("derive: table %s does not hold the expected balances: writing it\n", deriveTable)
			t0 := time.Now()
			if err := deriveWriteTable(ctx, f.pg, sums, counts); err != nil {
				st.Close()
				return nil, nil, err
			}
			fmt.Printf("derive: table written in %.2fs\n", time.Since(t0).Seconds())
		}
		return st, m, nil
	}

	// Load: the ledger, and at the same time the table.
	skey, vkey, err := note.GenerateKey(crand.Reader, "bench-derive.local")
	if err != nil {
		return nil, nil, err
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	st, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(quiet))
	if err != nil {
		return nil, nil, err
	}
	var tableErr error
	var tableTook time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		t0 := time.Now()
		tableErr = deriveWriteTable(ctx, f.pg, sums, counts)
		tableTook = time.Since(t0)
	})
	took, err := deriveLoad(ctx, st, *f)
	wg.Wait()
	if err == nil {
		err = tableErr
	}
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	res["load_seconds"], res["load_events_per_second"] = took.Seconds(), float64(f.events)/took.Seconds()
	res["table_seconds"] = tableTook.Seconds()
	fmt.Printf("derive: loaded %d events in %.2fs (%.0f events/s, to the covering checkpoint); table of %d rows written in %.2fs alongside\n",
		f.events, took.Seconds(), float64(f.events)/took.Seconds(), accounts, tableTook.Seconds())
	m = &deriveManifestFile{Events: f.events, Keys: f.keys, Seed: f.seed, Accounts: accounts, Total: total, NoteKey: skey, VerifierKey: vkey}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, deriveManifest), append(b, '\n'), 0o600); err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, m, nil
}

func readDeriveManifest(dir string) (*deriveManifestFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, deriveManifest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m deriveManifestFile
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("bench derive: %s: %w", deriveManifest, err)
	}
	return &m, nil
}

func deriveKeys(m *deriveManifestFile) (note.Signer, note.Verifier, error) {
	signer, err := note.NewSigner(m.NoteKey)
	if err != nil {
		return nil, nil, fmt.Errorf("bench derive: manifest note key: %w", err)
	}
	verifier, err := note.NewVerifier(m.VerifierKey)
	if err != nil {
		return nil, nil, fmt.Errorf("bench derive: manifest verifier key: %w", err)
	}
	return signer, verifier, nil
}

// deriveMix is SplitMix64's finalizer: event i's randomness is
// deriveMix(seed, i) and its successors.
func deriveMix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// deriveEvent returns event i's account, amount and the state its memo
// continues from.
func deriveEvent(seed uint64, i, keys int) (account int, amount int64, x uint64) {
	x = deriveMix(seed*0xD1B54A32D192ED03 ^ uint64(i))
	hi, _ := bits.Mul64(x, uint64(keys))
	x = deriveMix(x)
	return int(hi), 1 + int64(x%99_999), x
}

// deriveExpected returns each account's balance and event count.
func deriveExpected(f benchDeriveFlags) ([]int64, []uint32) {
	w := runtime.GOMAXPROCS(0)
	sums := make([][]int64, w)
	counts := make([][]uint32, w)
	var wg sync.WaitGroup
	for p := range w {
		wg.Go(func() {
			s, c := make([]int64, f.keys), make([]uint32, f.keys)
			for i := p * f.events / w; i < (p+1)*f.events/w; i++ {
				a, amt, _ := deriveEvent(f.seed, i, f.keys)
				s[a] += amt
				c[a]++
			}
			sums[p], counts[p] = s, c
		})
	}
	wg.Wait()
	for p := 1; p < w; p++ {
		for i := range sums[0] {
			sums[0][i] += sums[p][i]
			counts[0][i] += counts[p][i]
		}
	}
	return sums[0], counts[0]
}

// deriveAccount appends the name of account a of keys: "acct-000042".
func deriveAccount(b []byte, a, keys int) []byte {
	var digits [20]byte
	n := strconv.AppendInt(digits[:0], int64(a), 10)
	b = append(b, "acct-"...)
	for range max(6, len(strconv.Itoa(keys-1))) - len(n) {
		b = append(b, '0')
	}
	return append(b, n...)
}

const deriveMemoChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "

// appendDeriveEvent appends event i's payload, a JSON object of
// deriveEventLen bytes (more when its fields alone are longer).
func appendDeriveEvent(b []byte, seed uint64, i, keys int) []byte {
	a, amount, x := deriveEvent(seed, i, keys)
	start := len(b)
	b = append(b, `{"id":"e-`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `","type":"payment","account":"`...)
	b = deriveAccount(b, a, keys)
	b = append(b, `","amount":`...)
	b = strconv.AppendInt(b, amount, 10)
	b = append(b, `,"currency":"EUR","memo":"`...)
	for pad := deriveEventLen - (len(b) - start) - 2; pad > 0; {
		x = deriveMix(x)
		for r := x; r != 0 && pad > 0; r /= uint64(len(deriveMemoChars)) {
			b = append(b, deriveMemoChars[r%uint64(len(deriveMemoChars))])
			pad--
		}
	}
	return append(b, `"}`...)
}

// deriveLoad appends the events to the log and waits for the checkpoint
// that covers them.
func deriveLoad(ctx context.Context, st *ledger.Store, f benchDeriveFlags) (time.Duration, error) {
	l, err := st.CreateLog(deriveLog)
	if err != nil {
		return 0, err
	}
	jobs := (f.events + f.batch - 1) / f.batch
	start := time.Now()
	_, err = drive("load", f.producers, jobs, int64(f.batch), func(_, j int) error {
		from, to := j*f.batch, min((j+1)*f.batch, f.events)
		buf := make([]byte, 0, (to-from)*(deriveEventLen+16))
		es := make([]ledger.Entry, to-from)
		for i := from; i < to; i++ {
			n := len(buf)
			buf = appendDeriveEvent(buf, f.seed, i, f.keys)
			es[i-from] = ledger.Entry{ID: "e-" + strconv.Itoa(i), Payload: buf[n:len(buf):len(buf)], PayloadJSON: true}
		}
		_, err := l.Append(ctx, es)
		return err
	})
	if err != nil {
		return 0, err
	}
	if _, err := l.WaitCheckpoint(ctx, uint64(f.events)); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// deriveWriteTable writes the accounts with events and their balances to
// the table, replacing it.
func deriveWriteTable(ctx context.Context, dsn string, sums []int64, counts []uint32) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("bench derive: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + deriveTable,
		"CREATE TABLE " + deriveTable + " (account text, balance numeric)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench derive: postgres: %s: %w", q, err)
		}
	}
	a := 0
	var name []byte
	_, err = conn.CopyFrom(ctx, pgx.Identifier{deriveTable}, []string{"account", "balance"}, pgx.CopyFromFunc(func() ([]any, error) {
		for a < len(counts) && counts[a] == 0 {
			a++
		}
		if a == len(counts) {
			return nil, nil
		}
		name = deriveAccount(name[:0], a, len(counts))
		row := []any{string(name), sums[a]}
		a++
		return row, nil
	}))
	if err != nil {
		return fmt.Errorf("bench derive: postgres: copy into %s: %w", deriveTable, err)
	}
	for _, q := range []string{
		"ALTER TABLE " + deriveTable + " ADD PRIMARY KEY (account)",
		"VACUUM ANALYZE " + deriveTable,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("bench derive: postgres: %s: %w", q, err)
		}
	}
	return nil
}

// deriveTableMatches reports whether the table holds rows accounts summing
// to total.
func deriveTableMatches(ctx context.Context, dsn string, rows int, total int64) (bool, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, fmt.Errorf("bench derive: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", deriveTable).Scan(&exists); err != nil || !exists {
		return false, err
	}
	var n int64
	var sum string
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(balance), 0)::text FROM "+deriveTable).Scan(&n, &sum); err != nil {
		return false, fmt.Errorf("bench derive: postgres: %w", err)
	}
	return n == int64(rows) && sum == strconv.FormatInt(total, 10), nil
}

// deriveVerify runs the measured phase: the derivation check end to end,
// then (with -split) its parts apart.
func deriveVerify(ctx context.Context, st *ledger.Store, f benchDeriveFlags, m *deriveManifestFile, res map[string]any) error {
	dsn, _ := json.Marshal(f.pg)
	specs, err := rspec.Parse("bench-derive.yaml", fmt.Appendf(nil, deriveSpec, dsn))
	if err != nil {
		return err
	}
	spec := specs[0]
	d, err := rspec.Compile(spec)
	if err != nil {
		return err
	}
	workers := f.workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Start from a small heap, and from a reset peak where Linux allows.
	runtime.GC()
	debug.FreeOSMemory()
	rssBefore, hwmBefore := deriveProcKB("VmRSS"), deriveProcKB("VmHWM")
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	res["rss_before_bytes"], res["hwm_before_bytes"], res["hwm_reset"] = rssBefore, hwmBefore, reset
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
	gogc, limit := os.Getenv("GOGC"), debug.SetMemoryLimit(-1)
	if gogc == "" {
		gogc = "100"
	}
	res["gogc"], res["gomemlimit_bytes"] = gogc, limit
	limitText := "none"
	if limit != math.MaxInt64 {
		limitText = deriveMiB(limit)
	}
	fmt.Printf("derive: verify: %d workers, GOMAXPROCS %d, %d CPUs, GOGC %s, GOMEMLIMIT %s; RSS before %s (peak so far %s, reset: %v)\n",
		workers, runtime.GOMAXPROCS(0), runtime.NumCPU(), gogc, limitText, deriveMiB(rssBefore), deriveMiB(hwmBefore), reset)

	var foldEnd time.Time
	prog := newProgress("fold", int64(f.events))
	var last uint64
	r := rederive.NewRunner(rederive.LocalLedger{Store: st}, rederive.WithWorkers(workers), rederive.WithLogger(quiet),
		rederive.WithProgress(func(_ string, done, total uint64) {
			prog.add(int64(done - last))
			last = done
			if done == total && foldEnd.IsZero() {
				foldEnd = time.Now()
			}
		}))
	la0 := deriveLoadAvg()
	wait0 := deriveRunqWait()
	cpu0 := deriveCPU()
	start := time.Now()
	rep, err := r.Run(ctx, rederive.Job{Spec: spec, Derivation: d}, true)
	took := time.Since(start)
	cpu := deriveCPU() - cpu0
	wait := deriveRunqWait() - wait0
	prog.done()
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	hwm := deriveProcKB("VmHWM")
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if rep.State == rederive.StateError {
		return fmt.Errorf("bench derive: run failed (%s): %s", rep.ErrorKind, rep.Error)
	}
	drift := rep.Stats.Missing + rep.Stats.Mismatched + rep.Stats.Extra
	foldSec := took.Seconds()
	if !foldEnd.IsZero() {
		foldSec = foldEnd.Sub(start).Seconds()
	}
	res["seconds"], res["cpu_seconds"] = took.Seconds(), cpu.Seconds()
	res["state"], res["drift"], res["events_folded"], res["rows"] = rep.State, drift, rep.Events, rep.Stats.Rows
	res["e2e_fold_seconds"], res["e2e_after_fold_seconds"] = foldSec, took.Seconds()-foldSec
	res["peak_rss_bytes"], res["gc_cycles"], res["gc_pause_seconds"] = hwm, ms.NumGC, float64(ms.PauseTotalNs)/1e9
	res["load_average"], res["runnable_wait_seconds"] = la0+" "+deriveLoadAvg(), wait.Seconds()
	fmt.Printf("derive: end to end: %.2fs, %.2f CPU-s, %.2f s runnable waiting for a CPU (load average %s at the start, %s at the end)\n",
		took.Seconds(), cpu.Seconds(), wait.Seconds(), la0, deriveLoadAvg())
	fmt.Printf("derive:   state %s, %d events, %d keys, %d rows, %d drift; peak RSS %s; %d GCs, %.2fs of pauses\n",
		rep.State, rep.Events, rep.Keys, rep.Stats.Rows, drift, deriveMiB(hwm), ms.NumGC, float64(ms.PauseTotalNs)/1e9)
	fmt.Printf("derive:   fold (to the last entry read) %.2fs = %.0f events/s; then merge, export and compare %.2fs = %.0f rows/s\n",
		foldSec, float64(rep.Events)/foldSec, took.Seconds()-foldSec, float64(rep.Stats.Rows)/(took.Seconds()-foldSec))

	foldRate, compRate := 0.0, 0.0
	if !f.split && f.memProfile != "" {
		if err := deriveHeapProfile(f.memProfile); err != nil {
			return err
		}
	}
	if f.split {
		sr, err := deriveSplit(ctx, st, spec, d, workers, f.memProfile, res)
		if err != nil {
			return err
		}
		foldRate, compRate = sr.foldRate, sr.compareRate
	}

	status := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	full := f.events >= deriveTargetEventCount
	fmt.Println()
	fmt.Printf("derive: %d events into %d keys (%d rows in PostgreSQL), %d workers on %d CPUs\n", rep.Events, rep.Keys, rep.Stats.Rows, workers, runtime.NumCPU())
	fmt.Printf("  %-34s %-22s %-14s %s\n", "measure", "value", "target", "result")
	line := func(name, value, target string, ok bool) {
		fmt.Printf("  %-34s %-22s %-14s %s\n", name, value, target, status(ok))
	}
	if v, ok := res["load_seconds"].(float64); ok {
		fmt.Printf("  %-34s %-22s %-14s %s\n", "load (append to checkpoint)", fmt.Sprintf("%.1f s", v), "-", "(excluded)")
	}
	if v, ok := res["open_seconds"].(float64); ok {
		fmt.Printf("  %-34s %-22s %-14s %s\n", "open the ledger", fmt.Sprintf("%.1f s", v), "-", "(excluded)")
	}
	e2eOK := took.Seconds() < deriveTargetSeconds
	line("end to end (Runner.Run)", fmt.Sprintf("%.1f s (%.1f CPU-s)", took.Seconds(), cpu.Seconds()), "< 60 s", e2eOK)
	runFoldRate := float64(rep.Events) / foldSec
	line("fold within the run (to last read)", fmt.Sprintf("%.0f events/s", runFoldRate), ">= 500000/s", runFoldRate >= deriveTargetFoldRate)
	foldOK := foldRate >= deriveTargetFoldRate
	compOK := compRate >= deriveTargetCompRate
	if f.split {
		line("Fold alone (split run)", fmt.Sprintf("%.0f events/s", foldRate), ">= 500000/s", foldOK)
		line("Compare alone with PostgreSQL", fmt.Sprintf("%.0f rows/s", compRate), ">= 500000/s", compOK)
	}
	stateOK := rep.State == rederive.StateClean && drift == 0 && rep.Events == uint64(f.events) && rep.Stats.Matched == int64(m.Accounts)
	line("state", fmt.Sprintf("%s, %d drift", rep.State, drift), "clean, 0", stateOK)
	hwmNote := ""
	if !reset && f.phase == "all" {
		hwmNote = " (incl. load)"
	}
	memOK := hwm < deriveTargetPeakRSS
	line("peak RSS"+hwmNote, deriveMiB(hwm), "< 2048 MiB", memOK)
	fmt.Printf("  (wall times; load average %s when the run started: other processes sharing the CPUs slow them, not the CPU-s)\n", la0)
	if !full {
		fmt.Printf("  (a run of %d events: the targets are for %d)\n", f.events, deriveTargetEventCount)
	}
	if !f.split {
		foldOK, compOK = runFoldRate >= deriveTargetFoldRate, true
	}
	res["pass"] = e2eOK && foldOK && compOK && stateOK && memOK
	if !stateOK {
		return fmt.Errorf("bench derive: the run is %s with %d drift (%d missing, %d mismatched, %d extra), %d derivation errors",
			rep.State, drift, rep.Stats.Missing, rep.Stats.Mismatched, rep.Stats.Extra, rep.DerivationErrors)
	}
	return nil
}

type deriveSplitResult struct {
	foldRate, compareRate float64
}

// deriveSplit times Fold and Compare apart, and the parts below them:
// reading the log (Pebble and the entry decoding), reading and preparing
// events (JSON decoding and the key expression), exporting the states and
// scanning the table. Each part reports its wall time and the process's
// CPU time, whose rate per GOMAXPROCS CPUs is what the part would reach
// on CPUs of its own (the machine may be shared).
func deriveSplit(ctx context.Context, st *ledger.Store, spec *rspec.Spec, d fold.Derivation, workers int, memProfile string, res map[string]any) (deriveSplitResult, error) {
	var out deriveSplitResult
	lg := rederive.LocalLedger{Store: st}
	pin, ok, err := lg.Pin(ctx, deriveLog)
	if err != nil || !ok {
		return out, fmt.Errorf("bench derive: no checkpoint of %s: %v", deriveLog, err)
	}
	reader := lg.Reader(deriveLog, pin)
	n := pin.Size
	procs := float64(runtime.GOMAXPROCS(0))
	fmt.Printf("\nderive: split run: the parts timed apart (%d workers; load average %s)\n", workers, deriveLoadAvg())
	fmt.Printf("  %-44s %8s %8s  %18s  %s\n", "part", "wall", "CPU", "rate (wall)", "rate (CPU-s / GOMAXPROCS)")
	part := func(key, name, unit string, fn func() (float64, error)) (float64, error) {
		runtime.GC()
		t0, c0 := time.Now(), deriveCPU()
		units, err := fn()
		took, cpu := time.Since(t0), deriveCPU()-c0
		if err != nil {
			return 0, err
		}
		rate, cpuRate := units/took.Seconds(), units/(cpu.Seconds()/procs)
		fmt.Printf("  %-44s %7.2fs %7.2fs  %10.0f %-7s  %10.0f %s/s\n", name, took.Seconds(), cpu.Seconds(), rate, unit+"/s", cpuRate, unit)
		res["split_"+key+"_seconds"], res["split_"+key+"_cpu_seconds"] = took.Seconds(), cpu.Seconds()
		return rate, nil
	}

	// Read only: workers goroutines on disjoint ranges, as Fold reads.
	_, err = part("read", "read the log (Pebble + entry decoding)", "events", func() (float64, error) {
		return float64(n), deriveRanges(workers, n, func(from, to uint64) error {
			return reader.Entries(ctx, from, to, func(*ledger.Record) error { return nil })
		})
	})
	if err != nil {
		return out, err
	}
	// Read and prepare: JSON decoding, the key expression.
	_, err = part("prepare", "read + Prepare (JSON decode, key expression)", "events", func() (float64, error) {
		return float64(n), deriveRanges(workers, n, func(from, to uint64) error {
			return reader.Entries(ctx, from, to, func(r *ledger.Record) error {
				ev := fold.Event{Log: deriveLog, Index: r.Index, ID: r.Leaf.ID, Time: time.Unix(0, r.Leaf.Time).UTC(), Payload: r.Payload}
				_, _, err := d.Prepare(&ev)
				return err
			})
		})
	})
	if err != nil {
		return out, err
	}
	// Fold: the above, plus the steps by key and the merge of the shards.
	var fr *fold.Result
	out.foldRate, err = part("fold", "Fold (read, prepare, step, merge)", "events", func() (float64, error) {
		var err error
		fr, err = fold.Fold(ctx, d, nil, []fold.Span{{Reader: reader, From: 0, To: n, Pin: pin}},
			fold.Options{Workers: workers, ErrorBudget: spec.ErrorBudget, Fingerprint: rspec.Fingerprint(spec)})
		if err != nil {
			return 0, err
		}
		return float64(fr.Events), nil
	})
	if err != nil {
		return out, err
	}
	res["fold_events_per_second"] = out.foldRate
	expected := make(map[string]any, len(fr.States))
	_, err = part("export", "export the states (as Runner.Run does)", "keys", func() (float64, error) {
		for k, s := range fr.States {
			v, err := d.Export(s)
			if err != nil {
				return 0, err
			}
			expected[k] = v
		}
		return float64(len(expected)), nil
	})
	if err != nil {
		return out, err
	}
	if memProfile != "" {
		if err := deriveHeapProfile(memProfile); err != nil {
			return out, err
		}
		runtime.KeepAlive(fr)
	}
	fr = nil
	store, err := rstore.Open(ctx, spec.Store)
	if err != nil {
		return out, err
	}
	defer store.Close()
	_, err = part("scan", "scan the table (PostgreSQL, pgx, values)", "rows", func() (float64, error) {
		var rows int64
		err := store.Scan(ctx, func(rstore.Row) error { rows++; return nil })
		return float64(rows), err
	})
	if err != nil {
		return out, err
	}
	var drift int
	out.compareRate, err = part("compare", "Compare (scan, look up, equal)", "rows", func() (float64, error) {
		stats, err := compare.Compare(ctx, store, expected, spec.Compare, func(compare.Drift) error { drift++; return nil })
		return float64(stats.Rows), err
	})
	if err != nil {
		return out, err
	}
	res["compare_rows_per_second"] = out.compareRate
	if drift != 0 {
		return out, fmt.Errorf("bench derive: split run: %d drift", drift)
	}
	return out, nil
}

// deriveHeapProfile writes a heap profile of the live objects (after a
// collection) and of the allocations so far.
func deriveHeapProfile(path string) error {
	runtime.GC()
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(pf, 0); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}

// deriveRanges runs fn on workers disjoint ranges covering [0, n).
func deriveRanges(workers int, n uint64, fn func(from, to uint64) error) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			errs[w] = fn(uint64(w)*n/uint64(workers), uint64(w+1)*n/uint64(workers))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deriveProcKB reads a "kB" field of /proc/self/status, in bytes (0 where
// there is no /proc).
func deriveProcKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// deriveLoadAvg returns the 1-minute load average ("?" where unknown).
func deriveLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// deriveRunqWait returns the time this process's threads spent runnable
// but waiting for a CPU (0 where /proc/self/task/*/schedstat is missing):
// the time other processes, or more threads than CPUs, took from it.
func deriveRunqWait() time.Duration {
	tasks, _ := os.ReadDir("/proc/self/task")
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if f := strings.Fields(string(b)); err == nil && len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			ns += v
		}
	}
	return time.Duration(ns)
}

func deriveMiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func deriveCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
)

// deriveSetup opens the ledger of dir, loading it first unless a matching
// load is there to reuse, and makes sure the table holds the expected
// balances.
func deriveSetup(ctx context.Context, dir string, f *benchDeriveFlags, res map[string]any) (*ledger.Store, *deriveManifestFile, error) {
	m, err := readDeriveManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	reuse := m != nil && (f.reuse || f.phase == "verify")
	if reuse {
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
			return nil, nil, fmt.Errorf("derive: %s holds a load of %d events, %d keys, seed %d, not %d, %d, %d",
				dir, m.Events, m.Keys, m.Seed, f.events, f.keys, f.seed)
		}
	} else {
		if f.phase == "verify" {
			return nil, nil, fmt.Errorf("derive: %s holds no completed load (no %s): run -phase load first", dir, deriveManifest)
		}
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			return nil, nil, fmt.Errorf("derive: %s is not empty: pass -reuse to reuse its load, or name an empty or new directory", dir)
		}
	}
	t0 := time.Now()
	x := deriveExpectedOf(*f)
	res["events"], res["keys"], res["accounts"] = f.events, f.keys, x.accounts
	fmt.Printf("derive: %d events over %d keys (%d with events), seed %d; expected balances computed in %.2fs\n",
		f.events, f.keys, x.accounts, f.seed, time.Since(t0).Seconds())
	if reuse {
		st, err := deriveReuse(ctx, dir, f, m, x, res)
		return st, m, err
	}
	return deriveLoadNew(ctx, dir, f, x, res)
}

// deriveBalances are the expected balances of a load.
type deriveBalances struct {
	sums     []int64
	counts   []uint32
	accounts int   // with at least one event
	total    int64 // the sum of every amount
}

func deriveExpectedOf(f benchDeriveFlags) deriveBalances {
	x := deriveBalances{}
	x.sums, x.counts = deriveExpected(f)
	for i, c := range x.counts {
		if c > 0 {
			x.accounts++
			x.total += x.sums[i]
		}
	}
	return x
}

// deriveReuse opens the ledger of a completed load and rewrites the table
// unless it holds the expected balances.
func deriveReuse(ctx context.Context, dir string, f *benchDeriveFlags, m *deriveManifestFile, x deriveBalances, res map[string]any) (*ledger.Store, error) {
	if m.Accounts != x.accounts || m.Total != x.total {
		return nil, fmt.Errorf("derive: %s: the manifest's totals (%d accounts, %d) are not this build's (%d, %d)", dir, m.Accounts, m.Total, x.accounts, x.total)
	}
	signer, verifier, err := deriveKeys(m)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	st, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(loadtest.Quiet()))
	if err != nil {
		return nil, err
	}
	l, err := st.Log(deriveLog)
	if err == nil && (l.Checkpoint() == nil || l.Checkpoint().Size != uint64(f.events)) {
		err = fmt.Errorf("derive: %s: log %s is not checkpointed at %d entries", dir, deriveLog, f.events)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	res["open_seconds"] = time.Since(t0).Seconds()
	fmt.Printf("derive: reusing %s: ledger opened in %.2fs\n", dir, time.Since(t0).Seconds())
	ok, err := deriveTableMatches(ctx, f.pg, x.accounts, x.total)
	if err != nil {
		st.Close()
		return nil, err
	}
	if !ok {
		fmt.Printf("derive: table %s does not hold the expected balances: writing it\n", deriveTable)
		t0 := time.Now()
		if err := deriveWriteTable(ctx, f.pg, x.sums, x.counts); err != nil {
			st.Close()
			return nil, err
		}
		fmt.Printf("derive: table written in %.2fs\n", time.Since(t0).Seconds())
	}
	return st, nil
}

// deriveLoadNew loads the ledger, and at the same time the table, and
// records the load in its manifest.
func deriveLoadNew(ctx context.Context, dir string, f *benchDeriveFlags, x deriveBalances, res map[string]any) (*ledger.Store, *deriveManifestFile, error) {
	skey, vkey, err := note.GenerateKey(crand.Reader, "bench-derive.local")
	if err != nil {
		return nil, nil, err
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	st, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(loadtest.Quiet()))
	if err != nil {
		return nil, nil, err
	}
	var tableErr error
	var tableTook time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		t0 := time.Now()
		tableErr = deriveWriteTable(ctx, f.pg, x.sums, x.counts)
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
		f.events, took.Seconds(), float64(f.events)/took.Seconds(), x.accounts, tableTook.Seconds())
	m := &deriveManifestFile{Events: f.events, Keys: f.keys, Seed: f.seed, Accounts: x.accounts, Total: x.total, NoteKey: skey, VerifierKey: vkey}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, deriveManifest), append(b, '\n'), 0o600); err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, m, nil
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
	_, err = loadtest.Drive("load", f.producers, jobs, int64(f.batch), func(_, j int) error {
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
		return fmt.Errorf("derive: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + deriveTable,
		"CREATE TABLE " + deriveTable + " (account text, balance numeric)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("derive: postgres: %s: %w", q, err)
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
		return fmt.Errorf("derive: postgres: copy into %s: %w", deriveTable, err)
	}
	for _, q := range []string{
		"ALTER TABLE " + deriveTable + " ADD PRIMARY KEY (account)",
		"VACUUM ANALYZE " + deriveTable,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("derive: postgres: %s: %w", q, err)
		}
	}
	return nil
}

// deriveTableMatches reports whether the table holds rows accounts summing
// to total.
func deriveTableMatches(ctx context.Context, dsn string, rows int, total int64) (bool, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, fmt.Errorf("derive: postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", deriveTable).Scan(&exists); err != nil || !exists {
		return false, err
	}
	var n int64
	var sum string
	if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(balance), 0)::text FROM "+deriveTable).Scan(&n, &sum); err != nil {
		return false, fmt.Errorf("derive: postgres: %w", err)
	}
	return n == int64(rows) && sum == strconv.FormatInt(total, 10), nil
}

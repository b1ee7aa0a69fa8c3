package fold

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
)

// OpenFoldStore opens a ledger store in dir with a fresh key.
func OpenFoldStore(tb testing.TB, dir string) *ledger.Store {
	tb.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "rederive-test.example")
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return s
}

// foldGen makes the events of the test logs: payments and transfers
// between accounts, and a few events of other types.
type foldGen struct {
	rng      *mrand.Rand
	accounts int
	// prefix names the accounts ("a" by default); logs with different
	// prefixes share no key.
	prefix string
	// bad and fail are the fractions of events that fail to prepare (not
	// JSON) and whose steps fail.
	bad, fail float64
}

func newFoldGen(seed uint64, accounts int) *foldGen {
	return &foldGen{rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), accounts: accounts, prefix: "a"}
}

func (g *foldGen) account() string { return fmt.Sprintf("%s%d", g.prefix, g.rng.IntN(g.accounts)) }

func (g *foldGen) payload() []byte {
	r := g.rng.Float64()
	switch {
	case r < g.bad:
		return []byte(`{"type": "payment", "account": `)
	case r < g.bad+g.fail:
		return fmt.Appendf(nil, `{"type":"payment","account":%q,"amount":1,"fail":true}`, g.account())
	}
	amount := g.rng.IntN(1000) + 1
	switch r := g.rng.IntN(20); {
	case r < 13:
		return fmt.Appendf(nil, `{"type":"payment","account":%q,"amount":%d}`, g.account(), amount)
	case r < 19:
		return fmt.Appendf(nil, `{"type":"transfer","from":%q,"to":%q,"amount":%d}`, g.account(), g.account(), amount)
	default:
		return fmt.Appendf(nil, `{"type":"refund","account":%q}`, g.account())
	}
}

// appendEvents appends n generated events to l.
func appendEvents(tb testing.TB, l *ledger.Log, g *foldGen, n int) {
	tb.Helper()
	start := l.Size()
	const chunk = 4096
	for i := 0; i < n; i += chunk {
		es := make([]ledger.Entry, 0, min(chunk, n-i))
		for j := i; j < min(i+chunk, n); j++ {
			idx := start + uint64(j)
			es = append(es, ledger.Entry{
				ID:          fmt.Sprintf("%s-%d", l.Name(), idx),
				Time:        time.Unix(1_700_000_000, 0).Add(time.Duration(idx) * time.Millisecond),
				Payload:     g.payload(),
				PayloadJSON: true,
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := l.Append(ctx, es)
		cancel()
		if err != nil {
			tb.Fatalf("append to %s: %v", l.Name(), err)
		}
	}
}

func mustCreate(tb testing.TB, s *ledger.Store, name string) *ledger.Log {
	tb.Helper()
	l, err := s.CreateLog(name)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// pinAt pins l at size.
func pinAt(tb testing.TB, l *ledger.Log, size uint64) Pin {
	tb.Helper()
	root, err := l.RootAt(size)
	if err != nil {
		tb.Fatal(err)
	}
	return Pin{Log: l.Name(), Size: size, Root: root}
}

// spanOf is the span of l over [from, to).
func spanOf(tb testing.TB, l *ledger.Log, from, to uint64) Span {
	tb.Helper()
	return Span{Reader: LocalLog(l), From: from, To: to, Pin: pinAt(tb, l, to)}
}

// fullSpans are spans of each log from 0 to its current size.
func fullSpans(tb testing.TB, logs ...*ledger.Log) []Span {
	tb.Helper()
	var out []Span
	for _, l := range logs {
		out = append(out, spanOf(tb, l, 0, l.Size()))
	}
	return out
}

// nextSpans are spans of each log from r's pin to its current size.
func nextSpans(tb testing.TB, r *Result, logs ...*ledger.Log) []Span {
	tb.Helper()
	var out []Span
	for _, l := range logs {
		p, _ := r.Pin(l.Name())
		out = append(out, spanOf(tb, l, p.Size, l.Size()))
	}
	return out
}

func mustFold(tb testing.TB, d Derivation, base *Result, spans []Span, o Options) *Result {
	tb.Helper()
	r, err := Fold(context.Background(), d, base, spans, o)
	if err != nil {
		tb.Fatalf("Fold: %v", err)
	}
	return r
}

// encodedStates renders r's states with d.Encode, for comparison.
func encodedStates(tb testing.TB, d Derivation, r *Result) map[string]string {
	tb.Helper()
	out := make(map[string]string, len(r.States))
	for k, s := range r.States {
		b, err := d.Encode(s)
		if err != nil {
			tb.Fatalf("encode %q: %v", k, err)
		}
		out[k] = string(b)
	}
	return out
}

// sameResult fails the test unless a and b hold the same fold result.
func sameResult(tb testing.TB, d Derivation, what string, a, b *Result) {
	tb.Helper()
	if a.Derivation != b.Derivation || a.Fingerprint != b.Fingerprint {
		tb.Errorf("%s: derivation %q/%q vs %q/%q", what, a.Derivation, a.Fingerprint, b.Derivation, b.Fingerprint)
	}
	if !reflect.DeepEqual(a.Pins, b.Pins) {
		tb.Errorf("%s: pins\n%+v\nvs\n%+v", what, a.Pins, b.Pins)
	}
	if a.Events != b.Events || a.Applied != b.Applied || a.ErrorCount != b.ErrorCount {
		tb.Errorf("%s: events/applied/errors %d/%d/%d vs %d/%d/%d", what, a.Events, a.Applied, a.ErrorCount, b.Events, b.Applied, b.ErrorCount)
	}
	if !reflect.DeepEqual(a.Errors, b.Errors) {
		tb.Errorf("%s: errors differ:\n%v\nvs\n%v", what, a.Errors, b.Errors)
	}
	ea, eb := encodedStates(tb, d, a), encodedStates(tb, d, b)
	if len(ea) != len(eb) {
		tb.Errorf("%s: %d keys vs %d", what, len(ea), len(eb))
	}
	bad := 0
	for k, v := range ea {
		if w, ok := eb[k]; !ok || v != w {
			if bad++; bad <= 5 {
				tb.Errorf("%s: key %q: state %x vs %x (present %v)", what, k, v, w, ok)
			}
		}
	}
	if len(a.Newest) != len(a.States) || len(b.Newest) != len(b.States) {
		tb.Errorf("%s: %d/%d newest for %d/%d states", what, len(a.Newest), len(b.Newest), len(a.States), len(b.States))
	}
	for k, v := range a.Newest {
		if w := b.Newest[k]; v != w {
			if bad++; bad <= 5 {
				tb.Errorf("%s: key %q: newest %+v vs %+v", what, k, v, w)
			}
		}
	}
	if bad > 5 {
		tb.Errorf("%s: %d differences", what, bad)
	}
}

// refFold is the fold of d over logs [0, size) written the plain way: logs
// in name order, entries in index order, one goroutine.
func refFold(tb testing.TB, d Derivation, logs ...*ledger.Log) (states map[string]State, newest map[string]EventRef, applied uint64) {
	tb.Helper()
	logs = slices.Clone(logs)
	sort.Slice(logs, func(i, j int) bool { return logs[i].Name() < logs[j].Name() })
	states, newest = map[string]State{}, map[string]EventRef{}
	for _, l := range logs {
		err := l.Entries(context.Background(), 0, l.Size(), func(r *ledger.Record) error {
			ev := &Event{Log: l.Name(), Index: r.Index, ID: r.Leaf.ID, HasKey: r.Leaf.HasKey, Key: r.Leaf.Key,
				Time: time.Unix(0, r.Leaf.Time).UTC(), Source: r.Leaf.Source, Payload: r.Payload}
			keys, dec, err := d.Prepare(ev)
			if err != nil {
				return nil
			}
			for _, k := range keys {
				s, ok := states[k]
				if !ok {
					if s, err = d.Initial(k); err != nil {
						continue
					}
				}
				if s, err = d.Step(s, dec, ev, k); err != nil {
					continue
				}
				states[k] = s
				ref := EventRef{Log: l.Name(), Index: r.Index, ID: r.Leaf.ID, Time: ev.Time, LeafHash: r.LeafHash}
				if cur, ok := newest[k]; !ok || laterRef(ref, cur) {
					newest[k] = ref
				}
				applied++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return states, newest, applied
}

// laterRef reports whether a is newer than b: later in time, or at the
// same time, later by log name then index.
func laterRef(a, b EventRef) bool {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c > 0
	}
	if a.Log != b.Log {
		return a.Log > b.Log
	}
	return a.Index > b.Index
}

// threeLogs makes a store with three logs of n events each over shared
// accounts.
func threeLogs(tb testing.TB, n, accounts int) []*ledger.Log {
	tb.Helper()
	s := OpenFoldStore(tb, tb.TempDir())
	var logs []*ledger.Log
	// Created out of name order: Fold must sort.
	for i, name := range []string{"orders.2", "orders.0", "orders.1"} {
		l := mustCreate(tb, s, name)
		appendEvents(tb, l, newFoldGen(uint64(i+1), accounts), n)
		logs = append(logs, l)
	}
	return logs
}

func TestFoldDeterministic(t *testing.T) {
	n := 17000
	if testing.Short() {
		n = 3000
	}
	logs := threeLogs(t, n, 2000)
	d := &GoBalances{ordered: true}
	spans := fullSpans(t, logs...)

	states, newest, applied := refFold(t, d, logs...)
	var first *Result
	for _, w := range []int{1, 2, 3, 8} {
		r := mustFold(t, d, nil, spans, Options{Workers: w})
		if r.Events != uint64(3*n) || r.Applied != applied {
			t.Errorf("workers %d: %d events, %d applied; want %d, %d", w, r.Events, r.Applied, 3*n, applied)
		}
		if got := []string{r.Pins[0].Log, r.Pins[1].Log, r.Pins[2].Log}; !slices.IsSorted(got) || len(r.Pins) != 3 {
			t.Errorf("workers %d: pins not sorted: %v", w, got)
		}
		if first == nil {
			first = r
			// Against the plain sequential fold.
			ref := &Result{Derivation: d.Name(), Pins: r.Pins, States: states, Newest: newest, Events: r.Events, Applied: applied}
			sameResult(t, d, "engine vs reference", r, ref)
			continue
		}
		sameResult(t, d, fmt.Sprintf("workers 1 vs %d", w), first, r)
	}
}

func TestFoldIncremental(t *testing.T) {
	n := 6000
	if testing.Short() {
		n = 2000
	}
	for _, tc := range []struct {
		name    string
		ordered bool
		shared  bool // the logs share accounts
	}{
		{"ordered per-log keys", true, false},
		{"commutative shared keys", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := OpenFoldStore(t, t.TempDir())
			d := &GoBalances{ordered: tc.ordered}
			var logs []*ledger.Log
			var gens []*foldGen
			for i, name := range []string{"b", "a", "c"} {
				logs = append(logs, mustCreate(t, s, name))
				g := newFoldGen(uint64(10+i), 300)
				if !tc.shared {
					g.prefix = name + "-"
				}
				gens = append(gens, g)
			}
			// "c" is empty at first: new since the base.
			appendEvents(t, logs[0], gens[0], n)
			appendEvents(t, logs[1], gens[1], n/2)
			base := mustFold(t, d, nil, fullSpans(t, logs[0], logs[1]), Options{Workers: 3})
			keep := encodedStates(t, d, base)
			keepNewest := maps.Clone(base.Newest)
			keepPins := slices.Clone(base.Pins)

			appendEvents(t, logs[0], gens[0], n/3)
			appendEvents(t, logs[2], gens[2], n)
			// logs[1] does not grow, and is absent from the spans: it keeps
			// its pin.
			inc := mustFold(t, d, base, nextSpans(t, base, logs[0], logs[2]), Options{Workers: 2})
			full := mustFold(t, d, nil, fullSpans(t, logs...), Options{Workers: 4})
			sameResult(t, d, "incremental vs full", inc, full)

			// Again, with the unchanged log among the spans.
			appendEvents(t, logs[1], gens[1], n/4)
			inc2 := mustFold(t, d, inc, nextSpans(t, inc, logs...), Options{Workers: 1})
			full2 := mustFold(t, d, nil, fullSpans(t, logs...), Options{})
			sameResult(t, d, "second incremental vs full", inc2, full2)

			// The base is untouched.
			if !reflect.DeepEqual(encodedStates(t, d, base), keep) || !reflect.DeepEqual(base.Newest, keepNewest) || !reflect.DeepEqual(base.Pins, keepPins) {
				t.Error("Fold modified its base")
			}
		})
	}
}

func TestFoldSpans(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	a, b := mustCreate(t, s, "a"), mustCreate(t, s, "b")
	appendEvents(t, a, newFoldGen(1, 10), 100)
	appendEvents(t, b, newFoldGen(2, 10), 100)
	d := &GoBalances{}
	base := mustFold(t, d, nil, []Span{spanOf(t, a, 0, 50)}, Options{Fingerprint: "v1"})
	other := spanOf(t, b, 0, 100)
	other.Pin.Root[0] ^= 1
	for _, tc := range []struct {
		name  string
		base  *Result
		spans []Span
		o     Options
		want  string
	}{
		{"from not 0", nil, []Span{spanOf(t, a, 10, 100)}, Options{}, "starts at 10, want 0"},
		{"gap after base", base, []Span{spanOf(t, a, 60, 100)}, Options{Fingerprint: "v1"}, "starts at 60, want 50"},
		{"overlap with base", base, []Span{spanOf(t, a, 40, 100)}, Options{Fingerprint: "v1"}, "starts at 40, want 50"},
		{"new log not from 0", base, []Span{spanOf(t, b, 5, 100)}, Options{Fingerprint: "v1"}, "starts at 5, want 0"},
		{"fingerprint", base, []Span{spanOf(t, a, 50, 100)}, Options{Fingerprint: "v2"}, "definition"},
		{"derivation", base, []Span{spanOf(t, a, 50, 100)}, Options{Fingerprint: "v1"}, ""},
		{"pin size", nil, []Span{{Reader: LocalLog(a), To: 100, Pin: pinAt(t, a, 90)}}, Options{}, "pinned at size 90"},
		{"pin log", nil, []Span{{Reader: LocalLog(a), To: 100, Pin: pinAt(t, b, 100)}}, Options{}, "pinned to log b"},
		{"same log twice", nil, []Span{spanOf(t, a, 0, 100), spanOf(t, a, 0, 100)}, Options{}, "two spans of log a"},
		{"no reader", nil, []Span{{To: 1}}, Options{}, "no reader"},
		{"beyond the log", nil, []Span{{Reader: LocalLog(a), To: 200, Pin: Pin{Log: "a", Size: 200}}}, Options{}, "range"},
		{"root changed", nil, nil, Options{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dd := Derivation(d)
			switch tc.name {
			case "derivation":
				dd = &GoBalances{name: "other"}
				tc.want = `of derivation "balances"`
			case "root changed":
				full := mustFold(t, d, nil, []Span{spanOf(t, b, 0, 100)}, Options{})
				tc.base, tc.spans, tc.want = full, []Span{other}, "base was pinned at root"
				tc.spans[0].From = 100
			}
			_, err := Fold(context.Background(), dd, tc.base, tc.spans, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Fold: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// An empty fold and an empty span are fine.
	r := mustFold(t, d, nil, nil, Options{})
	if len(r.States) != 0 || r.Events != 0 || len(r.Pins) != 0 {
		t.Errorf("empty fold: %+v", r)
	}
	r = mustFold(t, d, base, []Span{spanOf(t, a, 50, 50)}, Options{Fingerprint: "v1"})
	sameResult(t, d, "empty span", base, r)
}

func TestFoldErrors(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	d := &GoBalances{ordered: true}
	var logs []*ledger.Log
	for i, name := range []string{"y", "x"} {
		l := mustCreate(t, s, name)
		g := newFoldGen(uint64(20+i), 50)
		g.bad, g.fail = 0.02, 0.03
		appendEvents(t, l, g, 5000)
		logs = append(logs, l)
	}
	spans := fullSpans(t, logs...)

	// The errors, found the plain way, in (log, index) order.
	var want []EventError
	for _, l := range []*ledger.Log{logs[1], logs[0]} {
		err := l.Entries(context.Background(), 0, l.Size(), func(r *ledger.Record) error {
			keys, _, err := d.Prepare(&Event{Payload: r.Payload})
			if err != nil {
				want = append(want, EventError{Log: l.Name(), Index: r.Index, Err: err.Error()})
			} else if bytes.Contains(r.Payload, []byte(`"fail":true`)) {
				for _, k := range keys {
					want = append(want, EventError{Log: l.Name(), Index: r.Index, Key: k, Err: "step refused"})
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(want) < 150 {
		t.Fatalf("only %d errors in the test data", len(want))
	}

	var first *Result
	for _, w := range []int{1, 2, 5} {
		r, err := Fold(context.Background(), d, nil, spans, Options{Workers: w, ErrorBudget: -1})
		if err != nil {
			t.Fatalf("workers %d, unlimited budget: %v", w, err)
		}
		if r.ErrorCount != len(want) {
			t.Errorf("workers %d: %d errors, want %d", w, r.ErrorCount, len(want))
		}
		if !reflect.DeepEqual(r.Errors, want[:maxErrors]) {
			t.Errorf("workers %d: errors\n%v\nwant\n%v", w, r.Errors, want[:maxErrors])
		}
		if first == nil {
			first = r
			states, newest, applied := refFold(t, d, logs...)
			sameResult(t, d, "engine vs reference", r, &Result{Derivation: d.Name(), Pins: r.Pins, States: states, Newest: newest,
				Events: r.Events, Applied: applied, ErrorCount: r.ErrorCount, Errors: r.Errors})
		} else {
			sameResult(t, d, fmt.Sprintf("workers %d", w), first, r)
		}
	}

	// Exactly at the budget is fine; one fewer fails.
	if _, err := Fold(context.Background(), d, nil, spans, Options{ErrorBudget: len(want)}); err != nil {
		t.Errorf("budget %d with %d errors: %v", len(want), len(want), err)
	}
	for _, budget := range []int{0, 10, len(want) - 1} {
		r, err := Fold(context.Background(), d, nil, spans, Options{ErrorBudget: budget})
		if !errors.Is(err, ErrBudget) {
			t.Errorf("budget %d: %v; want ErrBudget", budget, err)
			continue
		}
		// The errors met so far come back for the report.
		if r == nil || r.States != nil || r.ErrorCount <= budget || len(r.Errors) == 0 || len(r.Errors) > min(r.ErrorCount, maxErrors) {
			t.Errorf("budget %d: result %+v", budget, r)
		} else if e := r.Errors[0]; e.Log == "" || e.Err == "" {
			t.Errorf("budget %d: first error %+v", budget, e)
		}
	}

	// Incremental: the base's errors count against the budget, and the
	// errors equal a full fold's.
	// (The logs share keys: only a derivation whose steps commute gives
	// the same states.)
	du := &GoBalances{}
	half := []Span{spanOf(t, logs[0], 0, 2500), spanOf(t, logs[1], 0, 2500)}
	base := mustFold(t, du, nil, half, Options{ErrorBudget: -1})
	inc := mustFold(t, du, base, nextSpans(t, base, logs...), Options{ErrorBudget: -1})
	sameResult(t, du, "incremental with errors", mustFold(t, du, nil, spans, Options{ErrorBudget: -1}), inc)
	d = du
	if _, err := Fold(context.Background(), d, base, nextSpans(t, base, logs...), Options{ErrorBudget: len(want) - 1}); !errors.Is(err, ErrBudget) {
		t.Errorf("incremental over budget: %v", err)
	}
	if _, err := Fold(context.Background(), d, base, nextSpans(t, base, logs...), Options{ErrorBudget: base.ErrorCount - 1}); !errors.Is(err, ErrBudget) {
		t.Errorf("base over budget: %v", err)
	}
}

// foldGoroutines counts the goroutines this package started.
func foldGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("created by github.com/auditd/auditd/rederive."))
}

// checkNoLeak fails the test if, after a short wait, goroutines this
// package started still run, or more goroutines run than before (other
// than the store's own, which come and go with its flushes).
func checkNoLeak(t *testing.T, what string, before int) {
	t.Helper()
	var n, left int
	for range 200 {
		n, left = runtime.NumGoroutine(), foldGoroutines()
		if n <= before && left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if left > 0 {
		t.Errorf("%s: %d goroutines of the fold still run", what, left)
	} else {
		t.Logf("%s: %d goroutines, %d before, none of the fold's", what, n, before)
	}
}

func TestFoldCancel(t *testing.T) {
	logs := threeLogs(t, 8000, 500)
	spans := fullSpans(t, logs...)
	// A first fold lets the store start what it starts on first reads.
	_ = mustFold(t, &GoBalances{}, nil, spans, Options{})

	for _, tc := range []struct {
		name string
		// slow makes each Prepare sleep so the fold is long.
		slow bool
	}{
		{"prepare cancels", false},
		{"slow fold", true},
	} {
		for _, w := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/workers=%d", tc.name, w), func(t *testing.T) {
				before := runtime.NumGoroutine()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var seen atomic.Int64
				d := &GoBalances{hook: func(*Event) {
					if seen.Add(1) == 5000 && !tc.slow {
						cancel()
					}
					if tc.slow {
						time.Sleep(20 * time.Microsecond)
					}
				}}
				if tc.slow {
					time.AfterFunc(50*time.Millisecond, cancel)
				}
				start := time.Now()
				r, err := Fold(ctx, d, nil, spans, Options{Workers: w})
				if err != context.Canceled || r != nil {
					t.Fatalf("Fold: %v, %v; want context.Canceled", r, err)
				}
				if el := time.Since(start); el > 5*time.Second {
					t.Errorf("cancelled fold took %v", el)
				}
				if n := seen.Load(); n >= int64(len(logs)*8000) {
					t.Errorf("the fold ran to the end (%d entries prepared)", n)
				}
				checkNoLeak(t, "fold", before)
				// The same for Lineage.
				ctx2, cancel2 := context.WithCancel(context.Background())
				seen.Store(0)
				if tc.slow {
					time.AfterFunc(50*time.Millisecond, cancel2)
				} else {
					d.hook = func(*Event) {
						if seen.Add(1) == 5000 {
							cancel2()
						}
					}
				}
				_, err = Lineage(ctx2, d, spans, map[string]bool{"a1": true}, 3, Options{Workers: w})
				cancel2()
				if err != context.Canceled {
					t.Errorf("Lineage: %v, want context.Canceled", err)
				}
				checkNoLeak(t, "lineage", before)
			})
		}
	}
}

// failingReader fails after some entries.
type failingReader struct {
	LogReader
	failAt uint64
}

func (r failingReader) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	return r.LogReader.Entries(ctx, from, to, func(rec *ledger.Record) error {
		if rec.Index == r.failAt {
			return errors.New("disk on fire")
		}
		return fn(rec)
	})
}

func TestFoldReaderError(t *testing.T) {
	logs := threeLogs(t, 3000, 100)
	spans := fullSpans(t, logs...)
	spans[1].Reader = failingReader{LogReader: spans[1].Reader, failAt: 2222}
	before := runtime.NumGoroutine()
	_, err := Fold(context.Background(), &GoBalances{}, nil, spans, Options{Workers: 3})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || !strings.Contains(err.Error(), "orders.0") {
		t.Errorf("Fold: %v, want the reader's error", err)
	}
	checkNoLeak(t, "fold", before)
}

func TestFoldProgress(t *testing.T) {
	logs := threeLogs(t, 2000, 100)
	var calls []uint64
	var seen atomic.Int64
	d := &GoBalances{hook: func(*Event) {
		if seen.Add(1)%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}}
	_ = mustFold(t, d, nil, fullSpans(t, logs...), Options{Workers: 2, Progress: func(done, total uint64) {
		if total != 6000 {
			t.Errorf("progress total %d, want 6000", total)
		}
		calls = append(calls, done)
	}})
	if len(calls) < 2 || calls[len(calls)-1] != 6000 || !slices.IsSorted(calls) {
		t.Errorf("progress calls %v: want a few, rising to 6000", calls)
	}
}

// reusingReader hands out records whose buffers it overwrites once fn
// returns, as a reader reusing its buffers may.
type reusingReader struct{ LogReader }

func (r reusingReader) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	var rec ledger.Record
	buf := make([]byte, 0, 1024)
	return r.LogReader.Entries(ctx, from, to, func(in *ledger.Record) error {
		rec = *in
		buf = append(buf[:0], in.Payload...)
		rec.Payload = buf
		err := fn(&rec)
		for i := range buf {
			buf[i] = 'x'
		}
		rec = ledger.Record{}
		return err
	})
}

func TestFoldReaderReusesBuffers(t *testing.T) {
	logs := threeLogs(t, 3000, 100)
	d := &GoBalances{ordered: true}
	spans := fullSpans(t, logs...)
	want := mustFold(t, d, nil, spans, Options{})
	for i := range spans {
		spans[i].Reader = reusingReader{spans[i].Reader}
	}
	sameResult(t, d, "reader reusing its buffers", want, mustFold(t, d, nil, spans, Options{Workers: 3}))
}

// owningReusingReader is a reusingReader that says its records are its
// caller's (OwnedRecords), which they are not.
type owningReusingReader struct{ reusingReader }

func (owningReusingReader) RecordsOwned() {}

// TestFoldOwnedRecordsNotCopied checks that the fold copies no payload of
// a reader whose records are owned (OwnedRecords): the same reader that
// overwrites its buffers, folded right above when it does not say so,
// spoils the fold when it does.
func TestFoldOwnedRecordsNotCopied(t *testing.T) {
	logs := threeLogs(t, 3000, 100)
	d := &GoBalances{ordered: true}
	spans := fullSpans(t, logs...)
	want := mustFold(t, d, nil, spans, Options{})
	for i := range spans {
		spans[i].Reader = owningReusingReader{reusingReader{spans[i].Reader}}
	}
	got, err := Fold(context.Background(), d, nil, spans, Options{Workers: 3})
	if err == nil && reflect.DeepEqual(got.States, want.States) {
		t.Fatal("a reader's overwritten buffers did not reach the fold: its owned records were copied")
	}
}

// ExampleFold folds a log, continues the result as the log grows, and
// keeps the result across restarts in a bucket.
func ExampleFold() {
	dir, err := os.MkdirTemp("", "rederive-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "example.com")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	store, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, _ := store.CreateLog("payments.0")
	add := func(payloads ...string) {
		var es []ledger.Entry
		for _, p := range payloads {
			es = append(es, ledger.Entry{Payload: []byte(p), Time: time.Unix(1_700_000_000, 0)})
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			panic(err)
		}
	}
	span := func(from uint64) Span {
		root, _ := l.RootAt(l.Size())
		return Span{Reader: LocalLog(l), From: from, To: l.Size(), Pin: Pin{Log: l.Name(), Size: l.Size(), Root: root}}
	}
	d := &GoBalances{} // balances by account

	add(`{"type":"payment","account":"alice","amount":10}`,
		`{"type":"transfer","from":"alice","to":"bob","amount":3}`)
	r, err := Fold(context.Background(), d, nil, []Span{span(0)}, Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.States["alice"].(GoBalance).Sum, r.States["bob"].(GoBalance).Sum)

	// Keep the result; a later run loads it and folds only the new entries.
	bucket, _ := store.Bucket("rederive")
	if err := SaveResult(bucket, d, r); err != nil {
		panic(err)
	}
	add(`{"type":"payment","account":"bob","amount":5}`)
	base, err := LoadResult(bucket, d)
	if err != nil {
		panic(err)
	}
	p, _ := base.Pin("payments.0")
	r, err = Fold(context.Background(), d, base, []Span{span(p.Size)}, Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.States["alice"].(GoBalance).Sum, r.States["bob"].(GoBalance).Sum, r.Events, r.Newest["bob"].Index)
	// Output:
	// 7 3
	// 7 8 3 2
}

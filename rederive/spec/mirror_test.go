package spec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/store"
)

// memLog is a LogReader over records in memory.
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

func newMemLog(name string, payloads []string) *memLog {
	m := &memLog{name: name}
	for i, p := range payloads {
		r := &ledger.Record{Index: uint64(i), Payload: []byte(p), PayloadJSON: true}
		r.Leaf = merkle.Leaf{Log: name, ID: fmt.Sprintf("%s-%d", name, i), Time: time.Unix(1_760_000_000, 0).Add(time.Duration(i) * time.Second).UnixNano()}
		m.recs = append(m.recs, r)
	}
	return m
}

func (m *memLog) span() fold.Span {
	n := uint64(len(m.recs))
	return fold.Span{Reader: m, To: n, Pin: fold.Pin{Log: m.name, Size: n}}
}

// compileOne parses and compiles a one-derivation spec file.
func compileOne(t testing.TB, y string) (*Spec, fold.Derivation) {
	t.Helper()
	specs, err := Parse("t.yaml", []byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	d, err := Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	return specs[0], d
}

// exportAll exports every key of r with fold.Export.
func exportAll(t testing.TB, d fold.Derivation, r *fold.Result) map[string]any {
	t.Helper()
	out := make(map[string]any, len(r.States))
	for k, s := range r.States {
		v, err := fold.Export(d, k, s)
		if err != nil {
			t.Fatalf("export %q: %v", k, err)
		}
		out[k] = v
	}
	return out
}

// debezium returns a change stream of an accounts table, as Debezium
// writes it, and the table it leaves: n events (creates, updates,
// deletes), a truncate at each of truncates, inserts after the last.
func debezium(seed uint64, n int, truncates ...int) ([]string, map[string]map[string]any) {
	rng := rand.New(rand.NewPCG(seed, 1))
	table := map[string]map[string]any{}
	var out []string
	ev := func(op string, before, after any) {
		b, _ := json.Marshal(map[string]any{"op": op, "before": before, "after": after,
			"source": map[string]any{"table": "accounts", "lsn": len(out)}})
		out = append(out, string(b))
	}
	for i := range n {
		if slices.Contains(truncates, i) {
			ev("t", nil, nil)
			clear(table)
			continue
		}
		id := rng.IntN(400)
		key := fmt.Sprint(id)
		row := map[string]any{"id": id, "name": fmt.Sprintf("acct %d", id), "balance": fmt.Sprintf("%d.%02d", rng.IntN(10000), rng.IntN(100))}
		old, exists := table[key]
		switch {
		case !exists:
			ev("c", nil, row)
		case rng.IntN(4) == 0:
			ev("d", old, nil)
			delete(table, key)
			continue
		default:
			ev("u", old, row)
		}
		table[key] = row
	}
	// The store's rows, as PostgreSQL gives them: numeric as json.Number.
	stored := map[string]map[string]any{}
	for k, r := range table {
		stored[k] = map[string]any{"name": r["name"], "balance": json.Number(r["balance"].(string))}
	}
	return out, stored
}

const mirrorSpec = `derivations:
  - name: accounts
    sources: [dbserver.public.accounts]
    filter: event.op in ["c", "r", "u", "d", "t"]%s
    key: 'string(event.op == "d" ? event.before.id : event.after.id)'
    initial: "null"
    step: |
      event.op == "d" ? null :
      dyn({"name": event.after.name, "balance": decimal(event.after.balance), "lsn": event.source.lsn})
    value: 'state == null ? null : dyn({"name": state.name, "balance": state.balance})'
    compare: {null_is_missing: true}
    store: {file: {path: accounts.csv}}
`

const mirrorAllKeys = `
    all_keys: event.op == "t"
    step_all: "null"`

// drifts compares expected values with the stored table as a run does:
// a null expected value matches an absent row (null_is_missing).
func drifts(expected map[string]any, table map[string]map[string]any) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(expected)) {
		v := expected[k]
		row, ok := table[k]
		switch {
		case v == nil && !ok:
		case !ok:
			out = append(out, "missing "+k)
		case v == nil:
			out = append(out, "extra "+k)
		default:
			if d := compare.Equal(v, map[string]any(row), compare.Config{}); d != nil {
				out = append(out, fmt.Sprintf("mismatch %s: %v", k, d))
			}
		}
	}
	for k := range table {
		if _, ok := expected[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	return out
}

// TestSpecMirrorTruncate folds a Debezium change stream with truncates
// (op t) into a table mirror: all_keys and step_all clear every row at
// each truncate, value projects away the helper field lsn, and balances
// are decimals compared exactly with the numeric column. Without
// all_keys the truncated rows are reported as missing from a store that
// is right: a false drift.
func TestSpecMirrorTruncate(t *testing.T) {
	events, table := debezium(7, 6000, 900, 1024, 2500, 2501, 4100)
	log := newMemLog("dbserver.public.accounts", events)
	_, d := compileOne(t, fmt.Sprintf(mirrorSpec, mirrorAllKeys))
	if len(table) < 100 {
		t.Fatalf("test data: %d rows left", len(table))
	}
	for _, w := range []int{1, 2, 4} {
		r, err := fold.Fold(context.Background(), d, nil, []fold.Span{log.span()}, fold.Options{Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if ds := drifts(exportAll(t, d, r), table); len(ds) > 0 {
			t.Fatalf("workers %d: %d drifts, the first %v", w, len(ds), ds[:min(5, len(ds))])
		}
	}
	// Incrementally, from a base that ends before the last truncate.
	base, err := fold.Fold(context.Background(), d, nil, []fold.Span{{Reader: log, To: 3000, Pin: fold.Pin{Log: log.name, Size: 3000}}}, fold.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	sp := log.span()
	sp.From = 3000
	inc, err := fold.Fold(context.Background(), d, base, []fold.Span{sp}, fold.Options{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ds := drifts(exportAll(t, d, inc), table); len(ds) > 0 {
		t.Fatalf("incremental: %d drifts, the first %v", len(ds), ds[:min(5, len(ds))])
	}

	// Without all_keys: a false drift.
	_, plain := compileOne(t, fmt.Sprintf(mirrorSpec, ""))
	r, err := fold.Fold(context.Background(), plain, nil, []fold.Span{log.span()}, fold.Options{Workers: 2, ErrorBudget: -1})
	if err != nil {
		t.Fatal(err)
	}
	if ds := drifts(exportAll(t, plain, r), table); len(ds) == 0 || !strings.HasPrefix(ds[0], "missing") {
		t.Fatalf("without all_keys: drifts %v, want rows the truncates removed reported missing", ds[:min(5, len(ds))])
	}
}

// TestSpecValue checks the value projection: it maps the state to the
// compared value, sees the key, is not part of the fold (nor of its
// fingerprint), and without it a helper field drifts.
func TestSpecValue(t *testing.T) {
	const y = `derivations:
  - name: profiles
    sources: [users]
    key: event.user
    initial: '{"version": 0}'
    step: 'event.version > state.version ? {"name": event.name, "version": event.version} : state'%s
    store: {file: {path: p.jsonl}}
`
	payloads := []string{`{"user":"u1","name":"A","version":2}`, `{"user":"u1","name":"old","version":1}`, `{"user":"u2","name":"B","version":1}`}
	stored := map[string]any{"u1": map[string]any{"id": "u1", "name": "A"}, "u2": map[string]any{"id": "u2", "name": "B"}}
	log := newMemLog("users", payloads)
	fp := ""
	for _, c := range []struct {
		value  string
		drifts bool
	}{
		{"", true}, // the version is not in the store
		{`
    value: '{"id": key, "name": state.name}'`, false},
	} {
		s, d := compileOne(t, fmt.Sprintf(y, c.value))
		if fp == "" {
			fp = Fingerprint(s)
		} else if Fingerprint(s) != fp {
			t.Error("value changed the fingerprint")
		}
		r, err := fold.Fold(context.Background(), d, nil, []fold.Span{log.span()}, fold.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := exportAll(t, d, r)
		n := 0
		for k, v := range got {
			if compare.Equal(v, stored[k], compare.Config{}) != nil {
				n++
			}
		}
		if (n > 0) != c.drifts {
			t.Errorf("value %q: %d keys differ from the store: %v", c.value, n, got)
		}
		if c.value != "" {
			// The state keeps its version: only the export projects it.
			if st := fmt.Sprint(r.States["u1"]); !strings.Contains(st, "version") {
				t.Errorf("state %s lost its version", st)
			}
			// Export without the key cannot run a value that reads it.
			if _, err := d.Export(r.States["u1"]); err == nil || !strings.Contains(err.Error(), "fold.Export") {
				t.Errorf("Export without the key: %v", err)
			}
		}
	}
	// A value that does not read key exports through Export as well.
	_, d := compileOne(t, fmt.Sprintf(y, `
    value: state.name`))
	r, err := fold.Fold(context.Background(), d, nil, []fold.Span{log.span()}, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.Export(r.States["u1"]); err != nil || v != "A" {
		t.Errorf("Export: %v, %v", v, err)
	}
	// A value that fails is an export error naming it.
	_, d = compileOne(t, fmt.Sprintf(y, `
    value: state.nickname`))
	if _, err := fold.Export(d, "u1", r.States["u1"]); err == nil || !strings.Contains(err.Error(), "value") {
		t.Errorf("failing value: %v", err)
	}
}

// TestSpecDecimalCompare checks that a decimal state compares exactly
// with what stores hold: numeric columns and JSON numbers (json.Number),
// CSV cells, and integers; a double sum of the same amounts drifts.
func TestSpecDecimalCompare(t *testing.T) {
	payloads := make([]string, 10_000)
	for i := range payloads {
		payloads[i] = `{"account":"a","amount":"0.10","amount_number":0.10}`
	}
	log := newMemLog("payments", payloads)
	for _, c := range []struct {
		initial, step string
		exact         bool
	}{
		{`decimal("0")`, `state + decimal(event.amount)`, true},
		{`decimal(0)`, `state + decimal(event.amount_number)`, true},
		{`0.0`, `state + event.amount_number`, false},
	} {
		_, d := compileOne(t, fmt.Sprintf(`derivations:
  - name: sums
    sources: [payments]
    key: event.account
    initial: '%s'
    step: '%s'
    store: {file: {path: s.csv}}
`, c.initial, c.step))
		r, err := fold.Fold(context.Background(), d, nil, []fold.Span{log.span()}, fold.Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		got := exportAll(t, d, r)["a"]
		for _, stored := range []any{json.Number("1000.00"), json.Number("1000"), json.Number("1.0e3"), int64(1000), uint64(1000)} {
			if diffs := compare.Equal(got, stored, compare.Config{}); (diffs == nil) != c.exact {
				t.Errorf("%s: %#v vs stored %#v: %v", c.step, got, stored, diffs)
			}
		}
		if c.exact && compare.Equal(got, json.Number("1000.000000000001"), compare.Config{}) == nil {
			t.Errorf("%s: %#v equals 1000.000000000001", c.step, got)
		}
	}
}

// TestSpecFingerprintAllKeys checks that all_keys and step_all are part
// of the fingerprint, and that a spec without them keeps the fingerprint
// it had before they existed (saved states and snapshots stay usable).
func TestSpecFingerprintAllKeys(t *testing.T) {
	s := &Spec{Name: "a", Sources: []string{"l"}, Decode: "json", Key: "event.k", Initial: "0", Step: "state + 1"}
	b, _ := json.Marshal([]any{s.Name, s.Sources, s.Decode, s.Filter, s.Key, s.Initial, s.Step})
	h := sha256.Sum256(b)
	if got, want := Fingerprint(s), hex.EncodeToString(h[:16]); got != want {
		t.Fatalf("fingerprint %s, before all_keys %s", got, want)
	}
	fp := Fingerprint(s)
	s.Value, s.Commutative = "state * 2", true
	if Fingerprint(s) != fp {
		t.Error("value or commutative changed the fingerprint")
	}
	s.AllKeys, s.StepAll = `event.op == "t"`, "0"
	fa := Fingerprint(s)
	if fa == fp {
		t.Error("all_keys did not change the fingerprint")
	}
	s.StepAll = "1"
	if Fingerprint(s) == fa {
		t.Error("step_all did not change the fingerprint")
	}
}

// TestSpecTimestampCompare checks that a timestamp state, exported as an
// instant, equals the store's text of the same instant in any offset and
// a timestamp column, and differs from another instant.
func TestSpecTimestampCompare(t *testing.T) {
	log := newMemLog("orders", []string{`{"id":"o1","at":"2026-01-01T23:30:00+14:00"}`})
	_, d := compileOne(t, `derivations:
  - name: last-order
    sources: [orders]
    key: event.id
    initial: "null"
    step: '{"at": timestamp(event.at), "day": timestamp(event.at).getDate(), "text": string(timestamp(event.at))}'
    store: {file: {path: o.jsonl}}
`)
	r, err := fold.Fold(context.Background(), d, nil, []fold.Span{log.span()}, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := exportAll(t, d, r)["o1"]
	for _, at := range []any{"2026-01-01T09:30:00Z", "2026-01-01T10:30:00.000+01:00", "2026-01-01T23:30:00+14:00",
		store.Text("2026-01-01T09:30:00Z"), time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC)} {
		row := map[string]any{"at": at, "day": int64(1), "text": "2026-01-01T09:30:00Z"}
		if diffs := compare.Equal(got, row, compare.Config{}); diffs != nil {
			t.Errorf("stored at %#v: %v", at, diffs)
		}
	}
	row := map[string]any{"at": "2026-01-01T23:30:00Z", "day": int64(1), "text": "2026-01-01T09:30:00Z"}
	if diffs := compare.Equal(got, row, compare.Config{}); len(diffs) != 1 || diffs[0].Field != "at" {
		t.Errorf("another instant: %v", diffs)
	}
}

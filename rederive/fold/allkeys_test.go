package fold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
)

// mirror is a Debezium-style table mirror written in Go: op c and u set a
// row, d deletes it, t (a truncate) deletes every row. A row counts the
// events applied to it, so that a truncate applied twice, or out of
// place, shows.
type mirror struct {
	failTruncate string // keys with this prefix fail the truncate's step
}

type mirrorEvent struct {
	Op string `json:"op"`
	ID string `json:"id"`
	V  int64  `json:"v"`
}

type mirrorRow struct {
	Present bool
	V, N    int64
}

func (*mirror) Name() string      { return "mirror" }
func (*mirror) Sources() []string { return []string{"*"} }

func (*mirror) Prepare(ev *Event) ([]string, any, error) {
	var e mirrorEvent
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return nil, nil, err
	}
	switch e.Op {
	case "t":
		return nil, AllKeys{Decoded: &e}, nil
	case "c", "u", "d":
		return []string{e.ID}, &e, nil
	}
	return nil, nil, fmt.Errorf("unknown op %q", e.Op)
}

func (*mirror) Initial(string) (State, error) { return mirrorRow{}, nil }

func (m *mirror) Step(s State, dec any, _ *Event, key string) (State, error) {
	row := s.(mirrorRow)
	row.N++
	if ak, ok := dec.(AllKeys); ok {
		if ak.Decoded.(*mirrorEvent).Op != "t" {
			return nil, errors.New("AllKeys of another op")
		}
		if m.failTruncate != "" && strings.HasPrefix(key, m.failTruncate) {
			return nil, errors.New("truncate refused")
		}
		row.Present, row.V = false, 0
		return row, nil
	}
	e := dec.(*mirrorEvent)
	switch e.Op {
	case "c", "u":
		row.Present, row.V = true, e.V
	case "d":
		row.Present, row.V = false, 0
	}
	return row, nil
}

func (*mirror) Export(s State) (any, error) {
	if row := s.(mirrorRow); row.Present {
		return row.V, nil
	}
	return nil, nil
}

func (*mirror) Encode(s State) ([]byte, error) {
	row := s.(mirrorRow)
	return fmt.Appendf(nil, "%t/%d/%d", row.Present, row.V, row.N), nil
}

func (*mirror) Decode(b []byte) (State, error) {
	var row mirrorRow
	_, err := fmt.Sscanf(string(b), "%t/%d/%d", &row.Present, &row.V, &row.N)
	return row, err
}

// mirrorEvents returns n Debezium-style events over keys rows, with a
// truncate at each of truncates (indexes into the result) and an unknown
// op now and then.
func mirrorEvents(seed uint64, n, rows int, truncates ...int) [][]byte {
	g := newFoldGen(seed, rows)
	out := make([][]byte, n)
	for i := range out {
		e := mirrorEvent{ID: fmt.Sprintf("row-%d", g.rng.IntN(rows)), V: int64(i)}
		switch r := g.rng.IntN(100); {
		case slices.Contains(truncates, i):
			e = mirrorEvent{Op: "t"}
		case r < 40:
			e.Op = "c"
		case r < 80:
			e.Op = "u"
		case r < 99:
			e.Op = "d"
		default:
			e.Op = "x"
		}
		out[i], _ = json.Marshal(e)
	}
	return out
}

func appendPayloads(tb testing.TB, l *ledger.Log, payloads [][]byte) {
	tb.Helper()
	start := l.Size()
	es := make([]ledger.Entry, len(payloads))
	for i, p := range payloads {
		idx := start + uint64(i)
		es[i] = ledger.Entry{ID: fmt.Sprintf("%s-%d", l.Name(), idx), Time: time.Unix(1_700_000_000, 0).Add(time.Duration(idx) * time.Millisecond),
			Payload: p, PayloadJSON: true}
	}
	for len(es) > 0 {
		n := min(len(es), 4096)
		if _, err := l.Append(context.Background(), es[:n]); err != nil {
			tb.Fatal(err)
		}
		es = es[n:]
	}
}

// refFoldAll is the plain sequential fold with AllKeys entries: logs in
// name order, entries in index order, a truncate stepping every key that
// holds a state, in key order. It returns the result and every key's
// lineage.
func refFoldAll(tb testing.TB, d Derivation, logs ...*ledger.Log) (*Result, map[string][]EventRef) {
	tb.Helper()
	logs = slices.Clone(logs)
	sort.Slice(logs, func(i, j int) bool { return logs[i].Name() < logs[j].Name() })
	r := &Result{Derivation: d.Name(), States: map[string]State{}, Newest: map[string]EventRef{}}
	lineage := map[string][]EventRef{}
	for _, l := range logs {
		r.Pins = append(r.Pins, pinAt(tb, l, l.Size()))
		err := l.Entries(context.Background(), 0, l.Size(), func(rec *ledger.Record) error {
			r.Events++
			ev := &Event{Log: l.Name(), Index: rec.Index, ID: rec.Leaf.ID, Time: time.Unix(0, rec.Leaf.Time).UTC(), Payload: rec.Payload}
			ref := EventRef{Log: l.Name(), Index: rec.Index, ID: rec.Leaf.ID, Time: ev.Time, LeafHash: rec.LeafHash}
			keys, dec, err := d.Prepare(ev)
			if err != nil {
				r.ErrorCount++
				r.Errors = append(r.Errors, EventError{Log: l.Name(), Index: rec.Index, Err: err.Error()})
				return nil
			}
			if _, all := dec.(AllKeys); all {
				keys = slices.Sorted(maps.Keys(r.States))
			}
			failed := false // an event counts once, however many keys failed
			for _, k := range keys {
				s, ok := r.States[k]
				if !ok {
					s, _ = d.Initial(k)
				}
				if s, err = d.Step(s, dec, ev, k); err != nil {
					if !failed {
						r.ErrorCount++
						failed = true
					}
					r.Errors = append(r.Errors, EventError{Log: l.Name(), Index: rec.Index, Key: k, Err: err.Error()})
					continue
				}
				r.States[k] = s
				if cur, ok := r.Newest[k]; !ok || laterRef(ref, cur) {
					r.Newest[k] = ref
				}
				lineage[k] = append(lineage[k], ref)
				r.Applied++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if len(r.Errors) > maxErrors {
		r.Errors = r.Errors[:maxErrors]
	}
	return r, lineage
}

// TestFoldAllKeys folds a Debezium-style mirror (inserts, updates,
// deletes, truncates, more inserts after) with every number of workers,
// incrementally from bases before and after a truncate, and over several
// logs, against the plain sequential fold.
func TestFoldAllKeys(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	// Truncates in the first batch, mid-way through later ones, on a
	// batch's first and last entries, and twice in a row.
	truncates := []int{700, 1024, 2047, 2600, 2601, 4000}
	one := mustCreate(t, s, "db.0")
	appendPayloads(t, one, mirrorEvents(1, 5000, 300, truncates...))
	d := &mirror{failTruncate: "row-1"}

	want, lineage := refFoldAll(t, d, one)
	if want.ErrorCount < 50 || len(want.Errors) < 100 { // past the errors a Result keeps
		t.Fatalf("test data: %d errors", want.ErrorCount)
	}
	alive := 0
	for _, st := range want.States {
		if st.(mirrorRow).Present {
			alive++
		}
	}
	if alive == 0 || alive == len(want.States) {
		t.Fatalf("test data: %d of %d rows present", alive, len(want.States))
	}
	for _, w := range []int{1, 2, 3, 8} {
		r := mustFold(t, d, nil, fullSpans(t, one), Options{Workers: w, ErrorBudget: -1})
		sameResult(t, d, fmt.Sprintf("workers %d vs reference", w), r, want)
	}

	// Incremental, from bases that end before a truncate, on one, and
	// after one: a truncate applies to the base's keys too.
	for _, at := range []uint64{500, 1024, 2047, 2048, 2601, 3000} {
		base := mustFold(t, d, nil, []Span{spanOf(t, one, 0, at)}, Options{Workers: 2, ErrorBudget: -1})
		inc := mustFold(t, d, base, []Span{spanOf(t, one, at, one.Size())}, Options{Workers: 3, ErrorBudget: -1})
		sameResult(t, d, fmt.Sprintf("incremental from %d vs reference", at), inc, want)
	}

	// Lineage names the truncates among a key's entries.
	keys := map[string]bool{"row-7": true, "row-150": true, "row-299": true}
	got, err := Lineage(context.Background(), d, fullSpans(t, one), keys, 8, Options{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		wl := lineage[k]
		if len(wl) > 8 {
			wl = wl[len(wl)-8:]
		}
		if !reflect.DeepEqual(got[k], wl) {
			t.Errorf("lineage of %s:\n%v\nwant\n%v", k, got[k], wl)
		}
	}

	// Several logs: a truncate in one applies at its place in log-name
	// order, so db.1's later rows survive db.0's truncates and db.1's own
	// truncate clears db.0's rows.
	two := mustCreate(t, s, "db.1")
	appendPayloads(t, two, mirrorEvents(2, 3000, 300, 1500))
	want2, _ := refFoldAll(t, d, two, one)
	for _, w := range []int{1, 4} {
		r := mustFold(t, d, nil, fullSpans(t, one, two), Options{Workers: w, ErrorBudget: -1})
		sameResult(t, d, fmt.Sprintf("two logs, workers %d vs reference", w), r, want2)
	}
}

// TestFoldAllKeysBudget checks that a truncate that fails for many keys
// counts once against the budget (the budget counts events) and that its
// errors are reported in key order.
func TestFoldAllKeysBudget(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	l := mustCreate(t, s, "db.0")
	var ps [][]byte
	for i := range 2000 {
		ps = append(ps, fmt.Appendf(nil, `{"op":"c","id":"row-%d","v":%d}`, i, i))
	}
	ps = append(ps, []byte(`{"op":"t"}`))
	appendPayloads(t, l, ps)
	d := &mirror{failTruncate: "row-1"} // 1, 10-19, 100-199, 1000-1999: 1111 keys
	r, err := Fold(context.Background(), d, nil, fullSpans(t, l), Options{Workers: 4, ErrorBudget: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if r.ErrorCount != 1 || len(r.Errors) != maxErrors {
		t.Fatalf("%d errors, %d kept", r.ErrorCount, len(r.Errors))
	}
	var ks []string
	for _, e := range r.Errors {
		ks = append(ks, e.Key)
	}
	if !slices.IsSorted(ks) || ks[0] != "row-1" || ks[1] != "row-10" {
		t.Fatalf("errors not in key order: %v", ks[:5])
	}
	if _, err := Fold(context.Background(), d, nil, fullSpans(t, l), Options{Workers: 4, ErrorBudget: 0}); !errors.Is(err, ErrBudget) {
		t.Fatalf("budget 0: %v", err)
	}
}

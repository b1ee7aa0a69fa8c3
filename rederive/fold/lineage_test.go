package fold

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
)

// refLineage is every entry applied to each key by a plain sequential fold,
// oldest first.
func refLineage(tb testing.TB, d Derivation, logs ...*ledger.Log) map[string][]EventRef {
	tb.Helper()
	logs = slices.Clone(logs)
	sort.Slice(logs, func(i, j int) bool { return logs[i].Name() < logs[j].Name() })
	states, out := map[string]State{}, map[string][]EventRef{}
	for _, l := range logs {
		err := l.Entries(context.Background(), 0, l.Size(), func(r *ledger.Record) error {
			ev := &Event{Log: l.Name(), Index: r.Index, ID: r.Leaf.ID, Time: time.Unix(0, r.Leaf.Time).UTC(), Payload: r.Payload}
			keys, dec, err := d.Prepare(ev)
			if err != nil {
				return nil
			}
			for _, k := range keys {
				s, ok := states[k]
				if !ok {
					s, _ = d.Initial(k)
				}
				if s, err = d.Step(s, dec, ev, k); err != nil {
					continue
				}
				states[k] = s
				out[k] = append(out[k], EventRef{Log: l.Name(), Index: r.Index, ID: r.Leaf.ID, Time: ev.Time, LeafHash: r.LeafHash})
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

func TestLineage(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	var logs []*ledger.Log
	for i, name := range []string{"p.1", "p.0"} {
		l := mustCreate(t, s, name)
		g := newFoldGen(uint64(40+i), 200)
		g.fail = 0.05
		appendEvents(t, l, g, 6000)
		logs = append(logs, l)
	}
	// A key with few entries, all in one log.
	appendEvents(t, logs[0], &foldGen{rng: newFoldGen(99, 1).rng, accounts: 1, prefix: "rare"}, 3)
	d := &GoBalances{ordered: true}
	spans := fullSpans(t, logs...)
	all := refLineage(t, d, logs...)
	res := mustFold(t, d, nil, spans, Options{ErrorBudget: -1})

	keys := map[string]bool{"a0": true, "a7": true, "a199": true, "rare0": true, "nobody": true}
	for _, n := range []int{1, 5, 40} {
		for _, w := range []int{1, 4} {
			// Lineage reads from 0 whatever the spans' From.
			sp := slices.Clone(spans)
			sp[0].From = sp[0].To / 2
			got, err := Lineage(context.Background(), d, sp, keys, n, Options{Workers: w})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := got["nobody"]; ok || len(got) != 4 {
				t.Errorf("n=%d workers=%d: lineage of keys %v", n, w, slices.Sorted(maps.Keys(got)))
			}
			for k := range keys {
				want := all[k]
				if len(want) > n {
					want = want[len(want)-n:]
				}
				if !reflect.DeepEqual(got[k], want) {
					t.Errorf("n=%d workers=%d: lineage of %s:\n%v\nwant\n%v", n, w, k, got[k], want)
				}
				if len(all[k]) > 0 {
					newest := all[k][0]
					for _, r := range all[k] {
						if laterRef(r, newest) {
							newest = r
						}
					}
					if res.Newest[k] != newest {
						t.Errorf("the fold's newest of %s is %+v, want %+v", k, res.Newest[k], newest)
					}
				}
			}
		}
	}
	if len(all["rare0"]) != 3 || len(all["a7"]) < 40 {
		t.Fatalf("test data: rare0 has %d entries, a7 %d", len(all["rare0"]), len(all["a7"]))
	}
	if _, err := Lineage(context.Background(), d, spans, keys, 0, Options{}); err == nil {
		t.Error("Lineage with n 0 succeeded")
	}
	got, err := Lineage(context.Background(), d, spans, nil, 3, Options{})
	if err != nil || len(got) != 0 {
		t.Errorf("Lineage of no key: %v, %v", got, err)
	}
}

// countingReader counts the entries read through it.
type countingReader struct {
	LogReader
	n *atomic.Int64
}

func (r countingReader) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	return r.LogReader.Entries(ctx, from, to, func(rec *ledger.Record) error {
		r.n.Add(1)
		return fn(rec)
	})
}

// counted returns spans reading through a countingReader on n.
func counted(spans []Span, n *atomic.Int64) []Span {
	out := slices.Clone(spans)
	for i := range out {
		out[i].Reader = countingReader{out[i].Reader, n}
	}
	return out
}

// TestLineageKeyIndex checks that lineage given the fold's KeyIndex is
// the lineage without it (and a plain fold's), for a sparse key whose
// entries lie past the first 1,024-entry batch of two logs, a key in
// every batch and a key without entries, while reading fewer entries;
// and that batches the fold did not record (it continued from a base)
// are read.
func TestLineageKeyIndex(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	var logs []*ledger.Log
	for i, name := range []string{"p.1", "p.0"} {
		l := mustCreate(t, s, name)
		g := newFoldGen(uint64(70+i), 3000)
		for range 3 {
			appendEvents(t, l, g, 1500)
			appendEvents(t, l, &foldGen{rng: g.rng, accounts: 1, prefix: "rare"}, 1)
		}
		appendEvents(t, l, g, 700)
		logs = append(logs, l)
	}
	// A key in every batch.
	for _, l := range logs {
		appendEvents(t, l, &foldGen{rng: newFoldGen(5, 1).rng, accounts: 1, prefix: "busy"}, 1)
	}
	d := &GoBalances{ordered: true}
	spans := fullSpans(t, logs...)
	all := refLineage(t, d, logs...)
	if rare := all["rare0"]; len(rare) != 6 || rare[0].Index < 1024 || rare[0].Log != "p.0" || rare[5].Log != "p.1" {
		t.Fatalf("test data: rare0's entries %+v", rare)
	}
	x := NewKeyIndex()
	mustFold(t, d, nil, spans, Options{ErrorBudget: -1, KeyIndex: x})
	if x.Batches() != 12 {
		t.Fatalf("the fold recorded %d batches, want 12", x.Batches())
	}
	keys := map[string]bool{"rare0": true, "busy0": true, "nobody": true}
	for _, n := range []int{1, 4, 40} {
		var plain, indexed atomic.Int64
		want, err := Lineage(context.Background(), d, counted(spans, &plain), keys, n, Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Lineage(context.Background(), d, counted(spans, &indexed), keys, n, Options{Workers: 2, KeyIndex: x})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("n=%d: lineage with the index:\n%v\nwithout:\n%v", n, got, want)
		}
		for k := range keys {
			w := all[k]
			if len(w) > n {
				w = w[len(w)-n:]
			}
			if !reflect.DeepEqual(got[k], w) {
				t.Errorf("n=%d: lineage of %s:\n%v\nwant\n%v", n, k, got[k], w)
			}
		}
		// rare0's 6 entries are in 6 of 12 batches, busy0's in 2; the
		// other 4 batches are not read (a false positive could add one).
		if plain.Load() != int64(logs[0].Size()+logs[1].Size()) || indexed.Load() >= plain.Load()-1024 {
			t.Errorf("n=%d: entries read: %d with the index, %d without", n, indexed.Load(), plain.Load())
		}
		// Only the sparse key: most batches are skipped.
		indexed.Store(0)
		got, err = Lineage(context.Background(), d, counted(spans, &indexed), map[string]bool{"rare0": true}, n, Options{KeyIndex: x})
		if err != nil || !reflect.DeepEqual(got["rare0"], want["rare0"]) {
			t.Errorf("n=%d: lineage of rare0 alone: %v, %v", n, got, err)
		}
		if indexed.Load() > 7*1024 {
			t.Errorf("n=%d: lineage of rare0 read %d entries", n, indexed.Load())
		}
	}

	// A fold that continued from a base recorded batches from the base's
	// size: a lineage from 0 reads the others whole, and agrees.
	half := []Span{spanOf(t, logs[0], 0, 2000), spanOf(t, logs[1], 0, 2000)}
	base := mustFold(t, d, nil, half, Options{ErrorBudget: -1})
	y := NewKeyIndex()
	mustFold(t, d, base, nextSpans(t, base, logs...), Options{ErrorBudget: -1, KeyIndex: y})
	got, err := Lineage(context.Background(), d, spans, keys, 40, Options{KeyIndex: y})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Lineage(context.Background(), d, spans, keys, 40, Options{})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after a continued fold, lineage with the index:\n%v\nwithout:\n%v", got, want)
	}
}

// TestLineageKeyIndexAllKeys checks that a batch holding an entry that
// steps every key (a truncate) is read for any key's lineage, also when
// none of the batch's other entries is the key's.
func TestLineageKeyIndexAllKeys(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	l := mustCreate(t, s, "m.0")
	// row-7's entries in the first batch only; a truncate in the third.
	var payloads [][]byte
	for i := range 4000 {
		id := fmt.Sprintf("other-%d", i)
		if i < 1000 && i%100 == 0 {
			id = "row-7"
		}
		op := "c"
		if i == 2500 {
			op = "t"
		}
		p, _ := json.Marshal(mirrorEvent{Op: op, ID: id, V: int64(i)})
		payloads = append(payloads, p)
	}
	appendPayloads(t, l, payloads)
	d := &mirror{}
	spans := fullSpans(t, l)
	x := NewKeyIndex()
	mustFold(t, d, nil, spans, Options{ErrorBudget: -1, KeyIndex: x})
	keys := map[string]bool{"row-7": true}
	want, err := Lineage(context.Background(), d, spans, keys, 3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	got, err := Lineage(context.Background(), d, counted(spans, &read), keys, 3, Options{KeyIndex: x})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(got["row-7"]) != 3 || got["row-7"][2].Index != 2500 {
		t.Errorf("lineage with the index:\n%v\nwant\n%v (ending with the truncate, entry 2500)", got, want)
	}
	// Read: the batches the index cannot rule out for row-7, which are row-7's
	// (0) and the truncate's (2), and another only by a false positive of
	// its filter (about 1 in 400 a batch and key: the seed is random).
	h := []uint64{x.hash("row-7")}
	var want2 int64
	for from := uint64(0); from < 4000; from += 1024 {
		to := min(from+1024, 4000)
		skip := x.skips("m.0", from, to, h)
		if skip && (from == 0 || from == 2048) {
			t.Errorf("the index rules out batch [%d, %d), which holds row-7 or the truncate", from, to)
		}
		if !skip {
			want2 += int64(to - from)
		}
	}
	if read.Load() != want2 || want2 >= 4000 {
		t.Errorf("read %d entries, want %d: the 2 batches of row-7's entries and the truncate, and no batch the index rules out", read.Load(), want2)
	}
}

package fold

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sort"
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

package fold

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"slices"
)

// Lineage returns, for each of keys, the last n entries applied to it by a
// full fold of d over spans (each read from 0 to its pin, whatever its
// From), oldest first, in the order Fold applies them: logs in name order,
// then index order. A key no entry applied to is absent from the map.
//
// It is a second pass over the ledger, run only for the keys a comparison
// found drifting: entries are read and prepared in parallel as in Fold,
// and only the requested keys' steps are applied, so that an entry whose
// step fails is not counted as contributing. Derivation errors are not
// reported (Fold did); o's ErrorBudget and Fingerprint are ignored.
func Lineage(ctx context.Context, d Derivation, spans []Span, keys map[string]bool, n int, o Options) (map[string][]EventRef, error) {
	if n <= 0 {
		return nil, errors.New("rederive: lineage of fewer than one entry")
	}
	o.Fingerprint = ""
	spans, err := checkSpans(d, nil, spans, o, true)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return map[string][]EventRef{}, nil
	}
	w := o.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	trails := make(map[string]*trail, len(keys))
	p := &pipeline{
		d: d, spans: spans, workers: w, shards: 1, progress: o.Progress, seed: maphash.MakeSeed(),
		want: func(k string) bool { return keys[k] },
	}
	_, err = p.run(ctx, func(_ context.Context, b *batch) error {
		for i := range b.steps[0] {
			st := &b.steps[0][i]
			if st.pos == allKeysPos {
				for k, t := range trails { // keys are independent: any order
					t.step(d, st, k, n)
				}
				continue
			}
			t := trails[st.key]
			if t == nil {
				// As in Fold, a key holds a state once a step succeeded.
				s, err := d.Initial(st.key)
				if err != nil {
					continue
				}
				if t = (&trail{state: s}); t.step(d, st, st.key, n) {
					trails[st.key] = t
				}
				continue
			}
			t.step(d, st, st.key, n)
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string][]EventRef, len(trails))
	for k, t := range trails {
		if len(t.refs) == 0 {
			continue
		}
		out[k] = slices.Concat(t.refs[t.next:], t.refs[:t.next])
	}
	return out, nil
}

// trail is a key's state and its last entries, as Lineage follows it.
type trail struct {
	state State
	refs  []EventRef // a ring of the last n
	next  int        // where the next ref goes once the ring is full
}

// step applies st to key's state and, unless the step fails, records its
// entry among the last n. It reports whether the step succeeded.
func (t *trail) step(d Derivation, st *step, key string, n int) bool {
	s, err := d.Step(t.state, st.dec, &st.e.Event, key)
	if err != nil {
		return false
	}
	t.state = s
	e := &st.e.Event
	ref := EventRef{Log: e.Log, Index: e.Index, ID: e.ID, Time: e.Time, LeafHash: st.e.leafHash}
	if len(t.refs) < n {
		t.refs = append(t.refs, ref)
	} else {
		t.refs[t.next] = ref
		t.next = (t.next + 1) % n
	}
	return true
}

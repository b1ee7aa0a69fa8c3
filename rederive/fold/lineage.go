package fold

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/big"
	"reflect"
	"runtime"
	"slices"
	"strings"
)

// Lineage returns, for each of keys, the last n entries applied to it by a
// full fold of d over spans (each read from 0 to its pin, whatever its
// From), oldest first, in the order Fold applies them: logs in name order,
// then index order. A key no entry applied to is absent from the map.
//
// It is a second pass over the ledger, run only for the keys a comparison
// found drifting: entries are read and prepared in parallel as in Fold,
// and only the requested keys' steps are applied, so that an entry whose
// step fails is not counted as contributing. With o.KeyIndex filled by
// the fold, only the batches of entries that may step one of keys are
// read (see KeyIndex); the result is the same. Derivation errors are not
// reported (Fold did); o's ErrorBudget and Fingerprint are ignored.
func Lineage(ctx context.Context, d Derivation, spans []Span, keys map[string]bool, n int, o Options) (map[string][]EventRef, error) {
	trails, err := Explain(ctx, d, spans, keys, n, Suspects{}, o)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]EventRef, len(trails))
	for k, t := range trails {
		out[k] = t.Last
	}
	return out, nil
}

// Suspects says what Explain looks for in drifted keys' histories besides
// their last entries.
type Suspects struct {
	// Diff is, for a key whose expected and stored values are numbers, the
	// stored value minus the expected one. An entry whose contribution to
	// the key's exported value (its step's change to it) is Diff explains
	// the difference as an entry the store applied twice; one whose
	// contribution is -Diff, as one the store missed.
	Diff map[string]*big.Rat
	// Since is, for a key, the tree size of each log at the last run that
	// found the key in agreement with the store: the key's first entry at
	// or past it is where the disagreement can have started.
	Since map[string]map[string]uint64
}

// Suspect is an entry Explain names, and why.
type Suspect struct {
	EventRef
	Why string `json:"why"`
}

// Trail is what Explain found of a key: its last entries (oldest first)
// and the entries that can explain its difference, in fold order.
type Trail struct {
	Last     []EventRef
	Suspects []Suspect
}

// maxSuspects bounds the entries of one key Explain names for a matching
// contribution (the earliest are kept: the first of them is where the
// difference can have come in).
const maxSuspects = 5

// Explain is Lineage that also names, per key, the entries s points at:
// those whose contribution is the difference (or its opposite), and the
// first entry since the key last agreed with the store. It is one pass as
// Lineage is; the contributions are computed only for keys in s.Diff.
func Explain(ctx context.Context, d Derivation, spans []Span, keys map[string]bool, n int, s Suspects, o Options) (map[string]Trail, error) {
	if n <= 0 {
		return nil, errors.New("rederive: lineage of fewer than one entry")
	}
	o.Fingerprint = ""
	spans, err := checkSpans(d, nil, spans, o, true)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return map[string]Trail{}, nil
	}
	w := o.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	s2 := s
	trails := make(map[string]*trail, len(keys))
	p := &pipeline{
		d: d, spans: spans, workers: w, shards: 1, progress: o.Progress, seed: maphash.MakeSeed(),
		want:    func(k string) bool { return keys[k] },
		evalCtx: ctx,
	}
	if x := o.KeyIndex; x != nil {
		// Only the batches the fold recorded that may step a key, or
		// that it did not record, are read.
		hs := make([]uint64, 0, len(keys))
		for k := range keys {
			hs = append(hs, x.hash(k))
		}
		p.skip = func(log string, from, to uint64) bool { return x.skips(log, from, to, hs) }
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
				if t = (&trail{state: s, diff: s2.Diff[st.key], since: s2.Since[st.key]}); t.step(d, st, st.key, n) {
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
	out := make(map[string]Trail, len(trails))
	for k, t := range trails {
		if len(t.refs) == 0 {
			continue
		}
		out[k] = Trail{Last: slices.Concat(t.refs[t.next:], t.refs[:t.next]), Suspects: t.suspects}
	}
	return out, nil
}

// trail is a key's state and its last entries, as Lineage follows it.
type trail struct {
	state State
	refs  []EventRef // a ring of the last n
	next  int        // where the next ref goes once the ring is full

	diff     *big.Rat          // Suspects.Diff of the key, or nil
	since    map[string]uint64 // Suspects.Since of the key, or nil
	sinceHit bool              // the first entry since was found
	matches  int
	suspects []Suspect
}

// step applies st to key's state and, unless the step fails, records its
// entry among the last n. It reports whether the step succeeded.
func (t *trail) step(d Derivation, st *step, key string, n int) bool {
	s, err := d.Step(t.state, st.dec, &st.e.Event, key)
	if err != nil {
		return false
	}
	before := t.state
	t.state = s
	e := &st.e.Event
	ref := EventRef{Log: e.Log, Index: e.Index, ID: e.ID, Time: e.Time, LeafHash: st.e.leafHash}
	if t.since != nil && !t.sinceHit {
		if size, ok := t.since[e.Log]; ok && e.Index >= size {
			t.sinceHit = true
			t.suspects = append(t.suspects, Suspect{ref, "the key's first entry since the last run that found it in agreement with the store"})
		}
	}
	if t.diff != nil && t.matches < maxSuspects {
		if c, ok := contribution(d, key, before, s); ok {
			switch {
			case c.Cmp(t.diff) == 0:
				t.matches++
				t.suspects = append(t.suspects, Suspect{ref, "its contribution (" + c.RatString() + ") is the difference: the store may have applied it twice"})
			case new(big.Rat).Neg(c).Cmp(t.diff) == 0:
				t.matches++
				t.suspects = append(t.suspects, Suspect{ref, "its contribution (" + c.RatString() + ") is the opposite of the difference: the store may have missed it"})
			}
		}
	}
	if len(t.refs) < n {
		t.refs = append(t.refs, ref)
	} else {
		t.refs[t.next] = ref
		t.next = (t.next + 1) % n
	}
	return true
}

// contribution is the change a step made to a key's exported value, when
// both exports are numbers.
func contribution(d Derivation, key string, before, after State) (*big.Rat, bool) {
	b, err := Export(d, key, before)
	if err != nil {
		return nil, false
	}
	a, err := Export(d, key, after)
	if err != nil {
		return nil, false
	}
	x, ok := Number(b)
	if !ok {
		return nil, false
	}
	y, ok := Number(a)
	if !ok {
		return nil, false
	}
	return y.Sub(y, x), true
}

// Number returns an exported or stored value as an exact number, if it is
// one: an integer, a float, or decimal text (json.Number, or text such as a
// CSV cell or a Redis string holding a JSON number).
func Number(v any) (*big.Rat, bool) {
	var text string
	switch x := v.(type) {
	case int:
		return new(big.Rat).SetInt64(int64(x)), true
	case int64:
		return new(big.Rat).SetInt64(x), true
	case uint64:
		return new(big.Rat).SetUint64(x), true
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(x) == nil {
			return nil, false
		}
		return r, true
	case fmt.Stringer:
		text = x.String()
	case string:
		text = x
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.String {
			return nil, false
		}
		text = rv.String()
	}
	if text == "" || strings.ContainsAny(text, " /") {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(text)
	return r, ok
}

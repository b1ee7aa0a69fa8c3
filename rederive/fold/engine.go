package fold

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/auditd/auditd/merkle"
)

// Options tunes Fold and Lineage. The zero value is usable.
type Options struct {
	// Workers is the number of goroutines that read and prepare entries,
	// and the number that apply steps (default runtime.GOMAXPROCS(0)).
	// The result does not depend on it.
	Workers int
	// ErrorBudget is how many derivation errors a fold tolerates: once
	// the result's ErrorCount would exceed it, Fold fails with an error
	// wrapping ErrBudget. Negative: unlimited. The zero value fails on the
	// first error.
	ErrorBudget int
	// Progress, if set, is called from one goroutine with the number of
	// entries read so far and the number to read, at most about ten times
	// a second and once at the end.
	Progress func(done, total uint64)
	// Fingerprint identifies the derivation's definition, e.g. a hash of
	// its spec. Fold records it on the result and refuses a base computed
	// with a different one, so a changed definition forces a full fold.
	Fingerprint string
	// KeyIndex, if set, is filled by Fold with which keys each batch of
	// entries steps, and used by Lineage and Explain to skip the batches
	// that step none of their keys (see KeyIndex). Results do not depend
	// on it.
	KeyIndex *KeyIndex
}

// EventRef names one ledger entry: enough to fetch it and prove it.
type EventRef struct {
	Log      string      `json:"log"`
	Index    uint64      `json:"index"`
	ID       string      `json:"id"`
	Time     time.Time   `json:"time"`
	LeafHash merkle.Hash `json:"leaf_hash"`
}

// Result is a derivation's state over pinned prefixes of its source logs.
//
// A Result is not modified once Fold returns it; a later Fold over it
// returns a new Result and may share states with it.
type Result struct {
	Derivation string
	// Fingerprint is Options.Fingerprint of the folds that made it.
	Fingerprint string
	// Pins are the source logs' prefixes the result covers, sorted by log
	// name.
	Pins []Pin
	// States holds each derived key's state.
	States map[string]State
	// Newest holds, for each key of States, the newest entry applied to
	// it: the latest by event time, ties broken by log name, then index
	// (within a log whose times rise with the index, the last applied).
	// The order of application does not change it, so an incremental
	// fold's Newest equals a full fold's. The grace period of a drifting
	// key runs from its time.
	Newest map[string]EventRef
	// Events counts the entries the result covers (read by the folds
	// that made it), Applied the (entry, key) steps applied.
	Events  uint64
	Applied uint64
	// ErrorCount counts the events that met a derivation error (an event
	// that failed for several keys counts once); Errors holds the first 100
	// errors in (log, index) order.
	ErrorCount int
	Errors     []EventError
}

// Pin returns the result's pin of the named log.
func (r *Result) Pin(log string) (Pin, bool) {
	i := slices.IndexFunc(r.Pins, func(p Pin) bool { return p.Log == log })
	if i < 0 {
		return Pin{}, false
	}
	return r.Pins[i], true
}

const (
	// batchSize is the number of entries read and prepared as one unit.
	batchSize = 1024
	// maxErrors is how many EventErrors a Result keeps.
	maxErrors = 100
	// progressEvery is the least interval between two Progress calls.
	progressEvery = 100 * time.Millisecond
)

// Fold runs derivation d over spans, continuing from base (nil: from
// nothing), and returns the new result. It does not modify base.
//
// With a nil base every span starts at 0. Otherwise a span of a log that
// base pins starts exactly at that pin's size, and a span of a log new
// since base starts at 0; logs pinned by base and absent from spans keep
// their pins. That a span's log extends the base's pin (a consistency
// proof between the two checkpoints) is for the caller to check; Fold
// only refuses a span pinned at the base's size with a different root.
//
// The result is deterministic whatever Workers: within one log, each
// key's events are applied in index order; across logs, spans are applied
// in log-name order, so within one Fold all of log A's events for a key
// come before log B's. Logs are not ordered with respect to each other, so
// an incremental fold (A's and B's new entries after base's) equals a full
// fold exactly when no key takes entries from two logs (derivations keyed
// like the source's partitioning) or the steps of different logs commute
// (sums, counts, sets).
//
// An event that Prepare gives as AllKeys is applied, at its place in that
// order, to every key holding a state there (see AllKeys): within its log
// it is a barrier between the events before it and those after it, and
// across logs it is ordered like any other event.
//
// Entries are read and prepared in batches by Workers goroutines in
// parallel, put back in order, and each key's steps are applied by one of
// Workers goroutines chosen by a hash of the key, so Step runs
// sequentially per key and the hot path takes no lock. Step must not
// modify the state it is given (it may be shared with base); it returns a
// new one.
//
// A derivation error (Prepare, Initial or Step) skips that entry, or that
// key's step, and is recorded. Once the errors, counting base's, exceed
// ErrorBudget, Fold stops and returns an error wrapping ErrBudget, with a
// Result that holds only the errors met so far (ErrorCount, Errors) for
// reporting. When ctx ends, Fold stops its goroutines and returns
// ctx.Err().
func Fold(ctx context.Context, d Derivation, base *Result, spans []Span, o Options) (*Result, error) {
	spans, err := checkSpans(d, base, spans, o, false)
	if err != nil {
		return nil, err
	}
	if base != nil && o.ErrorBudget >= 0 && base.ErrorCount > o.ErrorBudget {
		return &Result{Derivation: d.Name(), Fingerprint: o.Fingerprint, ErrorCount: base.ErrorCount, Errors: base.Errors},
			fmt.Errorf("rederive: %s: %w: base holds %d errors, budget %d", d.Name(), ErrBudget, base.ErrorCount, o.ErrorBudget)
	}
	w := o.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f := &fold{d: d, base: base, budget: o.ErrorBudget, cancel: cancel}
	if base != nil {
		f.errCount.Store(int64(base.ErrorCount))
	}
	shards := make([]*shard, w)
	seed := maphash.MakeSeed()
	var wg sync.WaitGroup
	for i := range shards {
		sh := &shard{f: f, in: make(chan []step, 8), keys: newKeyTable(), idx: i, n: w, seed: seed}
		for _, s := range spans {
			sh.logs = append(sh.logs, s.Pin.Log) // entries name their log by its span
		}
		shards[i] = sh
		wg.Go(func() { sh.run(fctx) })
	}
	var prepErrs []foldError
	p := &pipeline{d: d, spans: spans, workers: w, shards: w, progress: o.Progress, seed: seed, evalCtx: fctx, index: o.KeyIndex}
	events, err := p.run(fctx, func(ctx context.Context, b *batch) error {
		for _, e := range b.errs {
			if len(prepErrs) < maxErrors {
				prepErrs = append(prepErrs, e)
			}
			f.counted(e)
		}
		for i, steps := range b.steps {
			if len(steps) == 0 {
				continue
			}
			select {
			case shards[i].in <- steps:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	})
	for _, sh := range shards {
		close(sh.in)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err == nil && fctx.Err() != nil {
		err = context.Cause(fctx)
	}
	if errors.Is(err, ErrBudget) {
		return &Result{Derivation: d.Name(), Fingerprint: o.Fingerprint,
			ErrorCount: int(f.errCount.Load()), Errors: f.errors(shards, prepErrs)}, err
	}
	if err != nil {
		return nil, err
	}
	return f.result(spans, shards, prepErrs, events, o.Fingerprint), nil
}

// checkSpans validates spans against d and base and returns them sorted by
// log name, each with its Pin.Log set. With full, spans are read from 0
// whatever their From (Lineage).
func checkSpans(d Derivation, base *Result, spans []Span, o Options, full bool) ([]Span, error) {
	if d == nil {
		return nil, errors.New("rederive: nil derivation")
	}
	if base != nil {
		if base.Derivation != d.Name() {
			return nil, fmt.Errorf("rederive: %s: base result is of derivation %q", d.Name(), base.Derivation)
		}
		if base.Fingerprint != o.Fingerprint {
			return nil, fmt.Errorf("rederive: %s: base result was computed with definition %q, not %q", d.Name(), base.Fingerprint, o.Fingerprint)
		}
	}
	out := slices.Clone(spans)
	for i := range out {
		s := &out[i]
		if s.Reader == nil {
			return nil, fmt.Errorf("rederive: %s: span %d has no reader", d.Name(), i)
		}
		name := s.Reader.Name()
		if s.Pin.Log == "" {
			s.Pin.Log = name
		}
		if s.Pin.Log != name {
			return nil, fmt.Errorf("rederive: %s: span of log %s is pinned to log %s", d.Name(), name, s.Pin.Log)
		}
		if s.Pin.Size != s.To {
			return nil, fmt.Errorf("rederive: %s: span of %s ends at %d but is pinned at size %d", d.Name(), name, s.To, s.Pin.Size)
		}
		if full {
			s.From = 0
		}
		if s.From > s.To {
			return nil, fmt.Errorf("rederive: %s: span of %s starts at %d after its end %d", d.Name(), name, s.From, s.To)
		}
		var start uint64
		if base != nil {
			if bp, ok := base.Pin(name); ok {
				start = bp.Size
				if bp.Size == s.To && bp.Root != s.Pin.Root && bp.Root != (merkle.Hash{}) && s.Pin.Root != (merkle.Hash{}) {
					return nil, fmt.Errorf("rederive: %s: %s at size %d has root %s, base was pinned at root %s", d.Name(), name, s.To, s.Pin.Root, bp.Root)
				}
			}
		}
		if s.From != start {
			return nil, fmt.Errorf("rederive: %s: span of %s starts at %d, want %d (the base's pin)", d.Name(), name, s.From, start)
		}
	}
	slices.SortFunc(out, func(a, b Span) int { return cmp.Compare(a.Pin.Log, b.Pin.Log) })
	for i := 1; i < len(out); i++ {
		if out[i].Pin.Log == out[i-1].Pin.Log {
			return nil, fmt.Errorf("rederive: %s: two spans of log %s", d.Name(), out[i].Pin.Log)
		}
	}
	return out, nil
}

// fold is the state of one Fold shared by its shards.
type fold struct {
	d        Derivation
	base     *Result
	budget   int
	cancel   context.CancelCauseFunc
	errCount atomic.Int64
	// failed holds the events counted in errCount, so that an event
	// failing for several keys (or in several shards) counts once.
	failed  sync.Map // eventPos -> struct{}
	nFailed atomic.Int64
}

// eventPos names an event: its log and index.
type eventPos struct {
	log   string
	index uint64
}

// maxFailedTracked bounds the events remembered for counting each failed
// event once; past it (an unlimited budget) each error counts.
const maxFailedTracked = 1 << 20

// counted counts a derivation error's event against the budget (once,
// however many of its keys failed), cancelling the fold when the budget is
// exceeded.
func (f *fold) counted(e foldError) {
	if f.nFailed.Load() < maxFailedTracked {
		if _, seen := f.failed.LoadOrStore(eventPos{e.Log, e.Index}, struct{}{}); seen {
			return
		}
		f.nFailed.Add(1)
	}
	n := f.errCount.Add(1)
	if f.budget >= 0 && n > int64(f.budget) {
		f.cancel(fmt.Errorf("rederive: %s: %w: more than %d derivation errors, the last at %s entry %d: %s",
			f.d.Name(), ErrBudget, f.budget, e.Log, e.Index, e.Err))
	}
}

// result merges the shards' states over base's.
func (f *fold) result(spans []Span, shards []*shard, prepErrs []foldError, events uint64, fingerprint string) *Result {
	r := &Result{Derivation: f.d.Name(), Fingerprint: fingerprint, Events: events}
	n := 0
	for _, sh := range shards {
		n += sh.keys.len()
	}
	if f.base != nil {
		r.States = maps.Clone(f.base.States)
		r.Newest = maps.Clone(f.base.Newest)
		r.Events += f.base.Events
		r.Applied = f.base.Applied
		for _, p := range f.base.Pins {
			if _, ok := slices.BinarySearchFunc(spans, p.Log, func(s Span, log string) int { return cmp.Compare(s.Pin.Log, log) }); !ok {
				r.Pins = append(r.Pins, p)
			}
		}
	}
	if r.States == nil {
		r.States = make(map[string]State, n)
	}
	if r.Newest == nil {
		r.Newest = make(map[string]EventRef, n)
	}
	// On a million keys the map inserts cost the most: States and Newest
	// are filled at once.
	type keySlot struct {
		key string
		sl  *slot
		sh  *shard
	}
	all := make([]keySlot, 0, n)
	for _, sh := range shards {
		sh.keys.each(func(k string, sl *slot) { all = append(all, keySlot{k, sl, sh}) })
		r.Applied += sh.applied
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, e := range all {
			r.States[e.key] = e.sl.state
		}
	})
	for _, e := range all {
		if sl := e.sl; sl.hasRef && !sl.fromBase { // else base's, cloned above
			r.Newest[e.key] = EventRef{Log: e.sh.logs[sl.log], Index: sl.index, ID: sl.id,
				Time: time.Unix(0, sl.ns).UTC(), LeafHash: sl.leafHash}
		}
	}
	wg.Wait()
	r.Errors = f.errors(shards, prepErrs)
	r.ErrorCount = int(f.errCount.Load())
	for _, s := range spans {
		r.Pins = append(r.Pins, s.Pin)
	}
	slices.SortFunc(r.Pins, func(a, b Pin) int { return cmp.Compare(a.Log, b.Log) })
	return r
}

// errors returns the first maxErrors errors of base and the fold, in the
// order they were met: (log, index, the key's position in the entry's
// keys).
func (f *fold) errors(shards []*shard, prepErrs []foldError) []EventError {
	var errs []foldError
	if f.base != nil {
		for _, e := range f.base.Errors {
			errs = append(errs, foldError{EventError: e})
		}
	}
	for _, sh := range shards {
		errs = append(errs, sh.errs...)
	}
	errs = append(errs, prepErrs...)
	// Stable: base errors of one entry keep their order.
	slices.SortStableFunc(errs, func(a, b foldError) int {
		if c := cmp.Compare(a.Log, b.Log); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Index, b.Index); c != 0 {
			return c
		}
		if c := cmp.Compare(a.pos, b.pos); c != 0 || !a.all || !b.all {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	var out []EventError
	for _, e := range errs[:min(len(errs), maxErrors)] {
		out = append(out, e.EventError)
	}
	return out
}

// foldError is an EventError with the position of its key among the
// entry's keys (-1 for an entry that failed to prepare), to order errors
// as they were met. An AllKeys entry's errors (all) are ordered by key.
type foldError struct {
	EventError
	pos int
	all bool
}

// shard applies the steps of the keys that hash to it.
type shard struct {
	f       *fold
	in      chan []step
	keys    *keyTable
	idx, n  int          // this shard's number, of n
	seed    maphash.Seed // the pipeline's, which picks a key's shard
	hasBase bool         // keys holds every key of base that is this shard's
	found   []*slot      // the slots of a batch's steps
	sink    int64
	logs    []string // the spans' logs, then base's others: slot.log
	applied uint64
	errs    []foldError // the first maxErrors
}

// slot is a key's state and its newest entry. It holds as few pointers as
// it can (the log by number, the time in nanoseconds): with a million
// keys, the collector scans every slot at each cycle.
type slot struct {
	state    State
	id       string // the newest entry's
	ns       int64  // its time, Unix nanoseconds
	index    uint64
	leafHash merkle.Hash
	log      int32 // shard.logs[log]
	hasRef   bool
	fromBase bool // the newest entry is base's: the result keeps its EventRef
}

// newerThan reports whether the entry e is newer than the slot's newest
// entry.
func (sh *shard) newerThan(sl *slot, e *entry) bool {
	switch {
	case !sl.hasRef || e.ns > sl.ns:
		return true
	case e.ns < sl.ns:
		return false
	case e.span != sl.log:
		return e.Log > sh.logs[sl.log]
	}
	return e.Index > sl.index
}

// locate looks up the slots of steps' keys, nil for those the table does
// not hold yet. It runs ahead of the steps so that the cache misses of a
// million keys' table and slots overlap, where each step would wait for
// its own in turn.
func (sh *shard) locate(steps []step) []*slot {
	found := sh.found[:0]
	for i := range steps {
		found = append(found, sh.keys.find(steps[i].key))
	}
	var sink int64
	for _, sl := range found {
		if sl != nil {
			sink += sl.ns
		}
	}
	sh.found, sh.sink = found, sh.sink+sink
	return found
}

// logOf returns the number of a log in sh.logs, adding it if need be.
func (sh *shard) logOf(name string) int32 {
	for i, l := range sh.logs {
		if l == name {
			return int32(i)
		}
	}
	sh.logs = append(sh.logs, name)
	return int32(len(sh.logs) - 1)
}

func (sh *shard) run(ctx context.Context) {
	d, base := sh.f.d, sh.f.base
	for {
		var steps []step
		var ok bool
		select {
		case steps, ok = <-sh.in:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
		found := sh.locate(steps)
		for i := range steps {
			st := &steps[i]
			if st.pos == allKeysPos {
				sh.stepAll(st)
				continue
			}
			sl := found[i]
			if sl == nil { // new, or added by an earlier step of the batch
				sl = sh.keys.find(st.key)
			}
			var cur State
			if sl != nil {
				cur = sl.state
			} else if s, ok := base.state(st.key); ok {
				cur = s
			} else {
				s, err := d.Initial(st.key)
				if err != nil {
					sh.fail(st, err)
					continue
				}
				cur = s
			}
			next, err := d.Step(cur, st.dec, &st.e.Event, st.key)
			if err != nil {
				if ctx.Err() != nil {
					return // interrupted: not the event's error
				}
				sh.fail(st, err)
				continue
			}
			if sl == nil {
				// The table copies the key, which may be a substring of
				// the event's payload.
				sl = sh.keys.add(st.key)
				if ref, ok := base.newest(st.key); ok {
					sl.id, sl.ns, sl.index, sl.leafHash = ref.ID, ref.Time.UnixNano(), ref.Index, ref.LeafHash
					sl.log, sl.hasRef, sl.fromBase = sh.logOf(ref.Log), true, true
				}
			}
			sl.state = next
			if e := st.e; sh.newerThan(sl, e) {
				sl.id, sl.ns, sl.index, sl.leafHash = e.ID, e.ns, e.Index, e.leafHash
				sl.log, sl.hasRef, sl.fromBase = e.span, true, false
			}
			sh.applied++
		}
	}
}

// stepAll applies an AllKeys entry to every key of the shard that holds
// a state: those of base first made the shard's. Errors are recorded in
// key order.
func (sh *shard) stepAll(st *step) {
	d, base := sh.f.d, sh.f.base
	if !sh.hasBase && base != nil {
		for k, s := range base.States {
			if sh.n > 1 && int(maphash.String(sh.seed, k)%uint64(sh.n)) != sh.idx {
				continue
			}
			if sh.keys.find(k) != nil {
				continue
			}
			sl := sh.keys.add(k)
			sl.state = s
			if ref, ok := base.newest(k); ok {
				sl.id, sl.ns, sl.index, sl.leafHash = ref.ID, ref.Time.UnixNano(), ref.Index, ref.LeafHash
				sl.log, sl.hasRef, sl.fromBase = sh.logOf(ref.Log), true, true
			}
		}
	}
	sh.hasBase = true
	var errs []foldError
	e := st.e
	sh.keys.each(func(k string, sl *slot) {
		next, err := d.Step(sl.state, st.dec, &e.Event, k)
		if err != nil {
			if e.Context().Err() != nil {
				return // interrupted: not the event's error
			}
			errs = append(errs, foldError{EventError: EventError{Log: e.Log, Index: e.Index, Key: k, Err: err.Error()}, all: true})
			return
		}
		sl.state = next
		if sh.newerThan(sl, e) {
			sl.id, sl.ns, sl.index, sl.leafHash = e.ID, e.ns, e.Index, e.leafHash
			sl.log, sl.hasRef, sl.fromBase = e.span, true, false
		}
		sh.applied++
	})
	slices.SortFunc(errs, func(a, b foldError) int { return cmp.Compare(a.Key, b.Key) })
	for _, fe := range errs {
		if len(sh.errs) < maxErrors {
			sh.errs = append(sh.errs, fe)
		}
		sh.f.counted(fe)
	}
}

func (sh *shard) fail(st *step, err error) {
	e := foldError{EventError: EventError{Log: st.e.Log, Index: st.e.Index, Key: st.key, Err: err.Error()}, pos: st.pos}
	if len(sh.errs) < maxErrors {
		sh.errs = append(sh.errs, e)
	}
	sh.f.counted(e)
}

// state returns the key's state in r, if r holds one.
func (r *Result) state(key string) (State, bool) {
	if r == nil {
		return nil, false
	}
	s, ok := r.States[key]
	return s, ok
}

// newest returns the key's newest entry in r, if r holds one.
func (r *Result) newest(key string) (EventRef, bool) {
	if r == nil {
		return EventRef{}, false
	}
	ref, ok := r.Newest[key]
	return ref, ok
}

package fold

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// entry is an event and its leaf hash, as the pipeline carries it.
type entry struct {
	Event
	ns       int64 // Event.Time in Unix nanoseconds
	leafHash merkle.Hash
	span     int32 // the position of Event.Log in the pipeline's spans
}

// step is one key's application of a prepared entry, or, with pos
// allKeysPos, an entry that applies to every key (dec is an AllKeys).
type step struct {
	key string
	dec any
	e   *entry
	pos int // the key's position among the entry's keys
}

// allKeysPos is the pos of an AllKeys entry's step: the pipeline gives
// one to every shard, at the entry's place in their steps.
const allKeysPos = -1

// batch is a run of entries of one span, prepared.
type batch struct {
	seq   uint64
	n     uint64   // entries read
	steps [][]step // by shard
	errs  []foldError
}

// job is a batch to read.
type job struct {
	seq      uint64
	span     int
	from, to uint64
}

// pipeline reads spans in batches, prepares them in parallel and hands
// them back in order.
type pipeline struct {
	d        Derivation
	spans    []Span // sorted by log name
	workers  int
	shards   int
	want     func(key string) bool // nil: every key
	progress func(done, total uint64)
	seed     maphash.Seed
	// evalCtx is the events' Context: the fold's, which outlives the
	// pipeline's own (steps run after the last batch is read).
	evalCtx context.Context
	// index, if set, records each batch's keys (Fold); skip, if set,
	// says a batch need not be read (Lineage): it is emitted empty.
	index *KeyIndex
	skip  func(log string, from, to uint64) bool
}

// run reads and prepares every span and calls emit with the batches in
// order (spans in order, entries in index order), from the calling
// goroutine. It returns the number of entries read. An error from emit
// stops the run and is returned; ctx's cancellation is returned as its
// cause.
func (p *pipeline) run(ctx context.Context, emit func(context.Context, *batch) error) (uint64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var total, jobsTotal uint64
	for _, s := range p.spans {
		total += s.To - s.From
		jobsTotal += (s.To - s.From + batchSize - 1) / batchSize
	}
	jobs := make(chan job, p.workers)
	results := make(chan *batch, p.workers)
	// Tokens bound the batches read but not yet emitted, so a slow batch
	// holds back the readers instead of piling up the ones after it.
	tokens := make(chan struct{}, 4*p.workers)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(jobs)
		var seq uint64
		for i, s := range p.spans {
			for from := s.From; from < s.To; from += batchSize {
				select {
				case tokens <- struct{}{}:
				case <-ctx.Done():
					return
				}
				select {
				case jobs <- job{seq: seq, span: i, from: from, to: min(from+batchSize, s.To)}:
				case <-ctx.Done():
					return
				}
				seq++
			}
		}
	})
	var workers sync.WaitGroup
	for range p.workers {
		workers.Go(func() {
			for j := range jobs {
				b, err := p.prepare(ctx, j)
				if err != nil {
					cancel(err)
					return
				}
				select {
				case results <- b:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Go(func() {
		workers.Wait()
		close(results)
	})

	pending := make(map[uint64]*batch, 4*p.workers)
	var next, done uint64
	var err error
	last := time.Now()
	for b := range results {
		if err != nil {
			continue // draining until the workers stop
		}
		pending[b.seq] = b
		for {
			b, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			<-tokens
			if err = emit(ctx, b); err != nil {
				cancel(err)
				break
			}
			done += b.n
			if p.progress != nil {
				if now := time.Now(); now.Sub(last) >= progressEvery {
					last = now
					p.progress(done, total)
				}
			}
		}
	}
	wg.Wait()
	if err != nil {
		return done, err
	}
	if ctx.Err() != nil {
		return done, context.Cause(ctx)
	}
	if next != jobsTotal {
		return done, fmt.Errorf("rederive: internal error: %d of %d batches folded", next, jobsTotal)
	}
	if p.progress != nil {
		p.progress(done, total)
	}
	return done, nil
}

// prepare reads and prepares one batch.
func (p *pipeline) prepare(ctx context.Context, j job) (*batch, error) {
	s := &p.spans[j.span]
	log := s.Pin.Log
	// A reader may reuse a record's buffers once fn returns; only the
	// records of a reader that says they are not (OwnedRecords) are kept
	// without a copy.
	_, owned := s.Reader.(OwnedRecords)
	b := &batch{seq: j.seq, n: j.to - j.from, steps: make([][]step, p.shards)}
	if p.skip != nil && p.skip(log, j.from, j.to) {
		return b, nil
	}
	var hs []uint64 // the hashes of the steps' keys, for index
	allKeys := false
	if p.index != nil {
		hs = make([]uint64, 0, j.to-j.from)
	}
	// Sized for the whole batch: steps point into it, so it must not grow.
	ents := make([]entry, 0, j.to-j.from)
	next := j.from
	// Room for a step per entry, spread over the shards, and a little
	// more: one allocation per shard for most batches.
	stepsCap := int(j.to-j.from)/p.shards + 16
	err := s.Reader.Entries(ctx, j.from, j.to, func(r *ledger.Record) error {
		if r.Index != next || next >= j.to {
			return fmt.Errorf("reader returned entry %d, want %d", r.Index, next)
		}
		next++
		if r.PayloadPruned {
			// Never a derivation error the budget absorbs: the fold
			// would silently leave the entry out.
			return fmt.Errorf("%w: %s entry %d", ErrPayloadPruned, log, r.Index)
		}
		key, src, payload := r.Leaf.Key, r.Leaf.Source, r.Payload
		if !owned {
			key, payload = bytes.Clone(key), bytes.Clone(payload)
			if src != nil {
				c := *src
				src = &c
			}
		}
		ents = append(ents, entry{
			Event: Event{
				Log: log, Index: r.Index, ID: r.Leaf.ID, HasKey: r.Leaf.HasKey, Key: key,
				Time: time.Unix(0, r.Leaf.Time).UTC(), Source: src, Payload: payload, ctx: p.evalCtx,
			},
			ns:       r.Leaf.Time,
			leafHash: r.LeafHash,
			span:     int32(j.span),
		})
		e := &ents[len(ents)-1]
		keys, dec, err := p.d.Prepare(&e.Event)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx) // interrupted: not the event's error
			}
			b.errs = append(b.errs, foldError{EventError: EventError{Log: log, Index: r.Index, Err: err.Error()}, pos: -1})
			ents = ents[:len(ents)-1]
			return nil
		}
		used := false
		if len(keys) == 0 {
			if ak, ok := dec.(AllKeys); ok {
				allKeys = true
				for sh := range b.steps {
					if b.steps[sh] == nil {
						b.steps[sh] = make([]step, 0, stepsCap)
					}
					b.steps[sh] = append(b.steps[sh], step{dec: ak, e: e, pos: allKeysPos})
				}
				used = true
			}
		}
		for pos, k := range keys {
			if p.index != nil {
				hs = append(hs, p.index.hash(k))
			}
			if p.want != nil && !p.want(k) {
				continue
			}
			sh := 0
			if p.shards > 1 {
				sh = int(maphash.String(p.seed, k) % uint64(p.shards))
			}
			if b.steps[sh] == nil {
				b.steps[sh] = make([]step, 0, stepsCap)
			}
			b.steps[sh] = append(b.steps[sh], step{key: k, dec: dec, e: e, pos: pos})
			used = true
		}
		if !used {
			ents = ents[:len(ents)-1] // reuse the slot
		}
		return nil
	})
	if err == nil && next != j.to {
		err = fmt.Errorf("reader stopped at entry %d", next)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("rederive: %s: read %s entries [%d, %d): %w", p.d.Name(), log, j.from, j.to, err)
	}
	if p.index != nil {
		p.index.record(log, j.from, j.to, allKeys, hs)
	}
	return b, nil
}

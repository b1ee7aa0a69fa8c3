package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// Payload pruning (see docs/ledger-format.md, "Pruned payloads"). Pruning
// rewrites the stored entries of a prefix of a log without their payloads,
// keeping the payload's SHA-256 in its place (flag bit 4), so every leaf
// still recomputes from what is stored and nothing the tree, the indexes
// or the checkpoints hold changes. The log's pruning watermark W, stored in
// the same batch as each rewritten group of entries, says every entry below
// W holds no payload; a crash between two batches leaves a watermark that
// matches the entries on disk, and pruning again resumes from it.

// kindPrune is the key kind of a log's pruning watermark:
//
//	p log -> watermark (u64): entries below it hold no payload
const kindPrune = 'p'

func pruneKey(log uint32) []byte { return logKey(kindPrune, log, 0) }

// IntegrityPrunedOutsidePolicy is the finding of an entry at or above the
// log's pruning watermark whose payload is gone though it was not an
// oversize record: its payload was deleted outside any pruning.
const IntegrityPrunedOutsidePolicy = "pruned_outside_policy"

// PruneOptions say which payloads PrunePayloads removes. Pruning removes
// a prefix: from the watermark up, it goes on while an entry is below
// Before or older than OlderThan, and stops at the first entry that is
// neither (an old event appended after a newer one keeps its payload until
// everything before it is pruned). It never goes past the latest signed
// checkpoint.
type PruneOptions struct {
	// Before prunes the entries with an index below it.
	Before uint64
	// OlderThan, if not zero, prunes the entries whose time (the event
	// time, or the arrival time auditd assigned) is before it.
	OlderThan time.Time
	// BatchSize is the entries rewritten per Pebble batch (default 4096);
	// each batch moves the watermark.
	BatchSize int
	// Rate bounds the entries pruned per second (0: no bound), so pruning
	// a long log does not crowd out the appends.
	Rate float64
	// UpTo, if not zero, bounds the pruning below it as the signed
	// checkpoint does: nothing at or past it is pruned (retention: a
	// derivation's snapshot).
	UpTo uint64
	// DryRun reports what would be pruned and writes nothing.
	DryRun bool
	// NoCompact skips compacting the pruned range; the space of the old
	// values is then reclaimed only when Pebble compacts it on its own.
	NoCompact bool

	afterBatch func(watermark uint64) error // test hook: runs after each batch is durable
}

// PruneResult is what PrunePayloads did.
type PruneResult struct {
	From, To uint64 // the watermark before and after (To: would be, on a dry run)
	// Limit is the size of the latest signed checkpoint, past which
	// nothing is pruned.
	Limit uint64
	// Pruned counts the entries whose payload was removed now; entries
	// without a payload already (oversize records) are passed over.
	Pruned uint64
	// PayloadBytes is the size of the payloads removed.
	PayloadBytes uint64
}

// pruneLocks serialises the prunes of one log (one *Log per store and name).
var pruneLocks sync.Map // *Log -> *sync.Mutex

// PruneWatermark returns the log's pruning watermark: the entries below it
// hold no payload. 0 if the log was never pruned.
func (l *Log) PruneWatermark() (uint64, error) { return readWatermark(l.s.db, l.id, l.name) }

// pruneWatermark returns the pruning watermark recorded in the snapshot.
func (r *RawLog) pruneWatermark() (uint64, error) { return readWatermark(r.r, r.id, r.name) }

func readWatermark(r pebble.Reader, id uint32, name string) (uint64, error) {
	v, closer, err := r.Get(pruneKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: %s: read pruning watermark: %w", name, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("ledger: %s: pruning watermark of %d bytes, want 8", name, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// PrunePayloads removes the payloads of the entries o selects (see
// PruneOptions), in batches, each written with the new watermark in one
// synced Pebble batch, then compacts the pruned range so its disk space is
// reclaimed. Each entry's leaf is checked against the tree before its
// payload goes: a mismatch stops the prune with an *IntegrityError, so
// pruning never erases the evidence of a corrupt payload. Pruning is
// idempotent: run again after a crash or an error, it resumes from the
// watermark. It runs alongside appends, and touches neither the log's
// source position, tiles, indexes nor checkpoints.
func (l *Log) PrunePayloads(ctx context.Context, o PruneOptions) (PruneResult, error) {
	mu, _ := pruneLocks.LoadOrStore(l, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if err := l.refusal(); err != nil {
		return PruneResult{}, fmt.Errorf("ledger: prune %s: %w", l.name, err)
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 4096
	}
	wm, err := l.PruneWatermark()
	if err != nil {
		return PruneResult{}, err
	}
	res := PruneResult{From: wm, To: wm}
	if cp := l.Checkpoint(); cp != nil {
		res.Limit = cp.Size
	}
	if o.UpTo > 0 && o.UpTo < res.Limit {
		res.Limit = o.UpTo
	}
	start := time.Now()
	for res.To < res.Limit {
		more, err := l.pruneBatch(ctx, &res, o)
		if err != nil {
			return res, err
		}
		if !more {
			break
		}
		if err := throttle(ctx, start, res.To-res.From, o.Rate); err != nil {
			return res, err
		}
	}
	if o.DryRun || o.NoCompact || res.Pruned == 0 {
		return res, nil
	}
	if err := l.s.db.Compact(ctx, entryKey(l.id, res.From), entryKey(l.id, res.To), true); err != nil {
		return res, fmt.Errorf("ledger: prune %s: compact entries %d..%d: %w", l.name, res.From, res.To, err)
	}
	return res, nil
}

// throttle waits until done entries since start fit the rate.
func throttle(ctx context.Context, start time.Time, done uint64, rate float64) error {
	if rate <= 0 {
		return ctx.Err()
	}
	wait := time.Duration(float64(done)/rate*float64(time.Second)) - time.Since(start)
	if wait <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pruneBatch prunes up to one batch from res.To and moves res.To past it.
// It reports whether pruning goes on after it.
func (l *Log) pruneBatch(ctx context.Context, res *PruneResult, o PruneOptions) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	from := res.To
	to := min(res.Limit, from+uint64(o.BatchSize))
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(l.id, from), UpperBound: entryKey(l.id, to)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	b := l.s.db.NewBatch()
	defer b.Close()
	var tile leafTiles
	next, more, pruned, bytes := from, true, uint64(0), uint64(0)
	for ok := it.First(); ok; ok = it.Next() {
		idx := binary.BigEndian.Uint64(it.Key()[5:])
		if idx != next {
			return false, l.missingEntry(next)
		}
		rec, err := l.decodeEntry(idx, it.Value(), true, nil)
		if err != nil {
			return false, err
		}
		if !o.selects(rec) {
			more = false
			break
		}
		h, err := tile.leaf(l, idx)
		if err != nil {
			return false, err
		}
		if err := l.checkLeaf(rec, h); err != nil {
			return false, err
		}
		next++
		if rec.PayloadPruned {
			continue
		}
		pruned++
		bytes += uint64(len(rec.Payload))
		_ = b.Set(it.Key(), appendStored(nil, &rec.Leaf, nil, rec.PayloadJSON, true), nil)
	}
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("ledger: prune %s: read entries: %w", l.name, err)
	}
	if more && next < to {
		return false, l.missingEntry(next)
	}
	if !o.DryRun && next > from {
		_ = b.Set(pruneKey(l.id), binary.BigEndian.AppendUint64(nil, next), nil)
		if err := l.s.write(func() error { return b.Commit(pebble.Sync) }); err != nil {
			return false, fmt.Errorf("ledger: prune %s: write entries %d..%d: %w", l.name, from, next, err)
		}
	}
	res.To, res.Pruned, res.PayloadBytes = next, res.Pruned+pruned, res.PayloadBytes+bytes
	if o.afterBatch != nil && !o.DryRun {
		if err := o.afterBatch(next); err != nil {
			return false, err
		}
	}
	return more && next < res.Limit, nil
}

// selects reports whether o prunes rec's payload.
func (o *PruneOptions) selects(rec *Record) bool {
	return rec.Index < o.Before || (!o.OlderThan.IsZero() && rec.Leaf.Time < o.OlderThan.UnixNano())
}

// leafTiles holds the level-0 tile of the leaves being pruned.
type leafTiles struct {
	n      uint64
	hashes []merkle.Hash
}

func (t *leafTiles) leaf(l *Log, idx uint64) (merkle.Hash, error) {
	n, off := idx/tileWidth, int(idx%tileWidth)
	if t.hashes == nil || t.n != n || off >= len(t.hashes) {
		hs, err := l.leafTile(n, off+1, idx, t.hashes)
		if err != nil {
			return merkle.Hash{}, err
		}
		t.n, t.hashes = n, hs
	}
	return t.hashes[off], nil
}

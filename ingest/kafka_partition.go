package ingest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// batch is records of one partition from one poll.
type batch struct {
	recs   []*kgo.Record // without transaction markers
	hwm    int64
	polled time.Time
	end    int64 // the offset after the last record fetched, markers included
}

// partition appends one partition's records to its log, in offset order.
type partition struct {
	k     *Kafka
	name  string
	topic string
	log   *ledger.Log
	in    chan batch
	done  chan struct{}

	mu  sync.Mutex // guards pos, topicID, readTo and progressAt; the run goroutine writes pos
	pos Position
	// topicID is the topic id the next position records (checkTopicID).
	topicID string
	// readTo is the offset after the last record handled, transaction
	// markers included: at or past pos.Next.
	readTo int64
	// progressAt is when readTo last advanced, or the partition was last
	// seen with nothing to read.
	progressAt time.Time

	consumed, bytes, gaps, conflicts, redelivered prometheus.Counter
}

func (p *partition) stop() {
	close(p.in)
	<-p.done
}

// caughtUp ends a re-read of the partition (see Kafka.reread): it has
// reached the log's position.
func (p *partition) caughtUp() {
	p.k.mu.Lock()
	if p.k.reread[p.name] {
		delete(p.k.reread, p.name)
		p.k.log.Info("kafka partition re-read up to the log's position", "log", p.name, "next_offset", p.pos.Next)
	}
	p.k.mu.Unlock()
}

func (p *partition) updateLag(hwm int64) {
	p.mu.Lock()
	next := p.pos.Next
	p.mu.Unlock()
	p.k.m.lag.WithLabelValues(p.name).Set(float64(max(hwm-next, 0)))
}

// partitionQueue is how many polled batches a partition's queue holds.
// With the batch being built, the chunk queued and the one appending, a
// partition holds at most five polls' records (each within the fetch's
// per-partition bound), as it did with four queued and one appending before
// the build stage: the consuming loop blocks on a full queue, and the
// client stops fetching once its buffered fetch is not taken.
const partitionQueue = 2

// chunk is at most BatchRecords records of a batch, with their entries
// built ahead of the append; last says it ends its batch.
type chunk struct {
	recs    []*kgo.Record
	entries []ledger.Entry // entries[i] is built from recs[i]
	last    bool
	b       batch
}

// run appends the partition's batches in two stages: one goroutine builds
// the entries of the next chunk (pure work: validating and marking the
// values) while this one appends the previous chunk and waits for it to be
// durable. The appends stay in order, one at a time: each commits the
// position after its records, so the position never leads the entries.
func (p *partition) run() {
	defer close(p.done)
	if err := p.recordTopicID(); err != nil {
		p.k.fail(p.name, fmt.Errorf("record topic id: %w", err))
		for range p.in {
		}
		return
	}
	chunks := make(chan chunk, 1)
	var failed atomic.Bool
	go p.build(chunks, &failed)
	for c := range chunks {
		if failed.Load() {
			continue // drained: the records are read again after a restart
		}
		if len(c.recs) > 0 {
			if err := p.append(c.recs, c.entries); err != nil {
				// The ledger refused or failed: stop this partition without
				// advancing; the records are read again after a restart.
				p.k.fail(p.name, fmt.Errorf("append at offset %d: %w", c.recs[0].Offset, err))
				failed.Store(true)
				continue
			}
			if p.pos.Next <= c.recs[len(c.recs)-1].Offset+1 {
				p.caughtUp()
			}
		}
		if c.last {
			p.batchDone(c.b)
		}
	}
}

// build splits the batches from p.in into chunks of at most BatchRecords
// records and builds their entries, until p.in is closed.
func (p *partition) build(chunks chan<- chunk, failed *atomic.Bool) {
	defer close(chunks)
	eb := entryBuilder{cfg: &p.k.cfg, log: p.name}
	for b := range p.in {
		if failed.Load() {
			continue
		}
		recs := b.recs
		for first := true; first || len(recs) > 0; first = false {
			n := min(len(recs), p.k.cfg.BatchRecords)
			chunks <- chunk{recs: recs[:n], entries: eb.entries(recs[:n]), last: n == len(recs), b: b}
			recs = recs[n:]
		}
	}
}

// batchDone notes a batch appended: how far the partition is read, its lag,
// the time from poll to durable.
func (p *partition) batchDone(b batch) {
	p.mu.Lock()
	if end := max(p.pos.Next, b.end); end > p.readTo {
		p.readTo, p.progressAt = end, time.Now()
	}
	p.mu.Unlock()
	p.updateLag(b.hwm)
	p.k.m.durable.Observe(time.Since(b.polled).Seconds())
}

// append ledgers recs (consecutive records of the partition, in offset
// order; built[i] the entry of recs[i]) with the new position in one
// ledger batch.
func (p *partition) append(recs []*kgo.Record, built []ledger.Entry) error {
	ctx := context.Background()
	p.mu.Lock()
	pos := p.pos.clone()
	pos.TopicID = p.topicID
	p.mu.Unlock()
	entries := built[:0] // the kept entries, in place: entries[j] is built[i] for some i >= j
	var last *kgo.Record
	var nbytes int
	for i, r := range recs {
		if r.Offset < pos.Next {
			// Delivered again (a rebalance, a retry): the log holds this
			// offset already. Check that it is the same record.
			if err := p.checkRedelivered(r, &pos); err != nil {
				return err
			}
			continue
		}
		if r.Offset > pos.Next {
			pos.addGap(pos.Next, r.Offset-1)
			p.gaps.Add(float64(r.Offset - pos.Next))
			p.k.log.Info("kafka offsets skipped", "log", p.name, "from", pos.Next, "to", r.Offset-1)
		}
		entries = append(entries, built[i])
		pos.Next = r.Offset + 1
		last = r
		nbytes += len(r.Value) + len(r.Key)
	}
	if last == nil && len(pos.Conflicted) == len(p.pos.Conflicted) && pos.Conflicts == p.pos.Conflicts && pos.TopicID == p.pos.TopicID {
		return nil
	}
	if err := p.appendEntries(ctx, entries, &pos); err != nil {
		return err
	}
	p.mu.Lock()
	p.pos = pos
	if pos.Next > p.readTo {
		p.readTo, p.progressAt = pos.Next, time.Now()
	}
	p.mu.Unlock()
	if last != nil {
		flagged := 0
		for i := range entries {
			if entries[i].Marks&^merkle.MarkDuplicateID != 0 {
				flagged++
			}
		}
		p.k.m.flagged.Add(float64(flagged))
		p.consumed.Add(float64(len(entries)))
		p.bytes.Add(float64(nbytes))
		// The group offset follows the ledger, never leads it.
		p.k.client().MarkCommitRecords(last)
	}
	return nil
}

// appendEntries appends entries with pos in one ledger batch, moving an
// entry whose id is taken to a fallback id until the log takes them all.
func (p *partition) appendEntries(ctx context.Context, entries []ledger.Entry, pos *Position) error {
	var tries []int // by entry: the fallback ids tried
	wait := 100 * time.Millisecond
	for {
		_, err := p.log.AppendSource(ctx, entries, pos.encode())
		if errors.Is(err, ledger.ErrNoSpace) {
			// The ledger's disk is nearly full: nothing was written, and it
			// takes appends again once space is freed. Wait for that here,
			// so the partition resumes by itself where it stopped.
			if wait == 100*time.Millisecond {
				p.k.log.Warn("kafka partition paused: the ledger's disk is nearly full", "log", p.name, "offset", pos.Next, "err", err)
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		var ce *ledger.ConflictError
		if !errors.As(err, &ce) {
			return err
		}
		// The id is taken by an earlier record of the partition (a
		// producer retry, a reused id): ledger this record under its
		// position instead, marked. If a producer took that id too,
		// number it. Deterministic: it depends only on the partition's
		// earlier records. Each retry moves one entry to its next id,
		// so this ends.
		e := &entries[ce.Item]
		if tries == nil {
			tries = make([]int, len(entries))
		}
		if tries[ce.Item] == 0 {
			e.Marks |= merkle.MarkDuplicateID
			p.k.m.dupIDs.WithLabelValues(p.name).Inc()
		}
		id, ok := fallbackID(e, &tries[ce.Item])
		if !ok {
			return err
		}
		e.ID = id
	}
}

// checkRedelivered compares a record at an offset the log already holds
// with the leaf the log has for it. A difference is an integrity violation:
// the original leaf stays, and the conflict is recorded in pos.
func (p *partition) checkRedelivered(r *kgo.Record, pos *Position) error {
	p.redelivered.Inc()
	rec, err := p.findOffset(r.Offset)
	if errors.Is(err, ledger.ErrNotFound) {
		// Inside a recorded gap: the offset was skipped when first read, so
		// a record there now was written after the fact.
		p.violation(r, pos, 0, fmt.Sprintf("offset %d was skipped when first read; a record is there now", r.Offset))
		return nil
	}
	if err != nil {
		return err
	}
	if RecordLeaf(p.k.cfg, r, &rec.Leaf) == rec.LeafHash {
		return nil
	}
	p.violation(r, pos, rec.Index, fmt.Sprintf("record at offset %d differs from the leaf at index %d", r.Offset, rec.Index))
	return nil
}

func (p *partition) violation(r *kgo.Record, pos *Position, index uint64, detail string) {
	e := p.k.entry(r)
	h := leafOf(p.name, &e)
	for _, c := range pos.Conflicted {
		if c.Offset == r.Offset && c.LeafHash == h.String() {
			return // the same rewrite seen again
		}
	}
	pos.addConflict(Conflict{Offset: r.Offset, Index: index, LeafHash: h.String()})
	p.conflicts.Inc()
	p.k.log.Error("integrity violation: kafka record differs from the ledger", "log", p.name, "offset", r.Offset, "index", index, "detail", detail)
	if f := p.k.onViolation; f != nil {
		f(Violation{Log: p.name, Kind: "offset_conflict", Offset: r.Offset, Index: index, LeafHash: h, Detail: detail})
	}
}

// findOffset finds the entry of the log read from offset, by binary search:
// a partition's log holds its records in offset order.
func (p *partition) findOffset(off int64) (*ledger.Record, error) {
	size := p.log.Size()
	i := sort.Search(int(size), func(i int) bool {
		rec, err := p.log.Entry(uint64(i))
		return err != nil || rec.Leaf.Source == nil || rec.Leaf.Source.Offset >= off
	})
	if uint64(i) == size {
		return nil, ledger.ErrNotFound
	}
	rec, err := p.log.Entry(uint64(i))
	if err != nil {
		return nil, err
	}
	if rec.Leaf.Source == nil || rec.Leaf.Source.Offset != off {
		return nil, ledger.ErrNotFound
	}
	return rec, nil
}

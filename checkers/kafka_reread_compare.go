package checkers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// rereadChunk bounds the entries held in memory at once while a window is
// compared (and the unit of the throttle).
const rereadChunk = 1024

// heldLeaf is what a comparison needs of a log's entry.
type heldLeaf struct {
	index  uint64
	offset int64
	hash   merkle.Hash
	leaf   merkle.Leaf // ID and Marks only
}

// logReread is the re-read of one log's partition within a pass.
type logReread struct {
	c         *KafkaReread
	p         Progress
	rl        rereadLog
	ps        partState
	compacted bool
	r         *partReader // opened at the first window
	n         map[string]uint64
	// startFresh says ps.start was listed again for the current chunk.
	startFresh bool
}

func (w *logReread) close() {
	if w.r != nil {
		w.r.cl.Close()
	}
}

// window compares the entries [lo, hi) with the partition, a chunk at a
// time.
func (w *logReread) window(ctx context.Context, lo, hi uint64) error {
	held := make([]heldLeaf, 0, rereadChunk)
	for i := lo; i < hi; i += rereadChunk {
		held = held[:0]
		err := w.rl.l.Entries(ctx, i, min(i+rereadChunk, hi), func(rec *ledger.Record) error {
			if rec.Leaf.Source == nil {
				return fmt.Errorf("entry %d has no source offset", rec.Index)
			}
			held = append(held, heldLeaf{index: rec.Index, offset: rec.Leaf.Source.Offset, hash: rec.LeafHash,
				leaf: merkle.Leaf{ID: rec.Leaf.ID, Marks: rec.Leaf.Marks}})
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		if err := w.compare(ctx, held); err != nil {
			return err
		}
		if err := w.p.Checked(ctx, len(held)); err != nil {
			return err
		}
	}
	return nil
}

// compare compares held (consecutive entries, in offset order) with the
// partition's records at their offsets.
func (w *logReread) compare(ctx context.Context, held []heldLeaf) error {
	if w.n == nil {
		w.n = map[string]uint64{}
	}
	w.startFresh = false
	end := w.ps.end
	hi := min(held[len(held)-1].offset, end-1)
	k := 0
	for off := held[0].offset; off <= hi; {
		if w.r == nil {
			r, err := newPartReader(w.c.conn, w.rl.pos.Topic, w.rl.pos.Partition, off, w.c.o.Timeout)
			if err != nil {
				return err
			}
			w.r = r
		}
		rec, err := w.r.peek(ctx, off)
		if err != nil {
			return err
		}
		for ; k < len(held) && held[k].offset < rec.Offset && held[k].offset <= hi; k++ {
			if err := w.absent(ctx, held[k], fmt.Sprintf("the broker returned offset %d next", rec.Offset)); err != nil {
				return err
			}
		}
		if rec.Offset > hi {
			break
		}
		off = rec.Offset + 1
		switch {
		case rec.Attrs.IsControl():
			// A transaction marker: a gap in the log too.
		case k < len(held) && held[k].offset == rec.Offset:
			w.match(held[k], rec)
			k++
		default:
			w.found(nil, resultMismatch, ledger.IntegritySourceMismatch, rec.Offset, "the partition holds a record at this offset, which the log skipped as a gap when it read the partition")
		}
	}
	for ; k < len(held); k++ {
		h := held[k]
		w.found(&h, resultMissing, ledger.IntegritySourceMissing, h.offset, fmt.Sprintf(
			"the log holds this offset (entry %d), beyond the partition's end (high watermark %d): the partition lost records it had", h.index, end))
	}
	return nil
}

// match compares a record with the entry at its offset.
func (w *logReread) match(h heldLeaf, rec *kgo.Record) {
	got := ingest.RecordLeaf(w.c.cfg, rec, &h.leaf)
	if got == h.hash {
		w.n[resultMatch]++
		w.c.m.add(w.c.Name(), resultMatch, 1)
		w.c.sus.set(w.rl.name, h.index, false)
		return
	}
	w.found(&h, resultMismatch, ledger.IntegritySourceMismatch, h.offset, fmt.Sprintf(
		"the broker's record hashes to leaf %s, the log holds leaf %s at entry %d", got, h.hash, h.index))
}

// absent classifies an offset the log holds that the partition skipped:
// gone by retention if now below the log start offset, compacted away on a
// compacted topic, else missing.
func (w *logReread) absent(ctx context.Context, h heldLeaf, why string) error {
	start := w.ps.start
	if !w.compacted && h.offset >= start && !w.startFresh {
		// Retention may have moved the start since the pass began (asked
		// once per chunk).
		w.startFresh = true
		s, err := w.r.start(ctx)
		if err != nil {
			return err
		}
		start = max(s, start)
		w.ps.start = start
	}
	switch classifyAbsent(h.offset, start, w.compacted) {
	case resultRetention:
		w.n[resultRetention]++
		w.c.m.add(w.c.Name(), resultRetention, 1)
	case resultCompacted:
		w.n[resultCompacted]++
		w.c.m.add(w.c.Name(), resultCompacted, 1)
	default:
		w.found(&h, resultMissing, ledger.IntegritySourceMissing, h.offset, fmt.Sprintf(
			"the log holds this offset (entry %d), inside the partition's retained range (log start offset %d), on a topic that is not compacted, but the broker does not return it (%s)", h.index, start, why))
	}
	return nil
}

// classifyAbsent says what an offset the log holds and the broker did not
// return is: resultRetention below the partition's log start offset,
// resultCompacted on a compacted topic, else resultMissing (an integrity
// finding).
func classifyAbsent(offset, logStart int64, compacted bool) string {
	switch {
	case offset < logStart:
		return resultRetention
	case compacted:
		return resultCompacted
	}
	return resultMissing
}

func (w *logReread) found(h *heldLeaf, result, kind string, offset int64, detail string) {
	w.n[result]++
	w.c.m.add(w.c.Name(), result, 1)
	f := Finding{Log: w.rl.name, Kind: kind, Detail: fmt.Sprintf("topic %q partition %d offset %d: %s", w.rl.pos.Topic, w.rl.pos.Partition, offset, detail)}
	if h != nil {
		f.Index = At(h.index)
		w.c.sus.set(w.rl.name, h.index, true)
	}
	w.p.Found(f)
}

// seekAhead is how far ahead of the reader's position a read may start
// before the reader seeks instead of reading through.
const seekAhead = 4 * rereadChunk

// partReader reads one partition directly (no group), forward, control
// records included.
type partReader struct {
	cl      *kgo.Client
	adm     *kadm.Client
	topic   string
	part    int32
	timeout time.Duration
	buf     []*kgo.Record
	pos     int64 // the offset after the last record fetched, or the last seek
}

func newPartReader(conn []kgo.Opt, topic string, part int32, from int64, timeout time.Duration) (*partReader, error) {
	cl, err := kgo.NewClient(append(slices.Clip(conn),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().At(from)}}),
		// As the source reads: aborted transactions' records are ledgered.
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(8<<20),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &partReader{cl: cl, adm: kadm.NewClient(cl), topic: topic, part: part, timeout: timeout, pos: from}, nil
}

// peek returns the partition's first record at or after off, waiting for
// it up to the timeout. Records below off are dropped.
func (r *partReader) peek(ctx context.Context, off int64) (*kgo.Record, error) {
	if off > r.pos+seekAhead || off < r.pos && (len(r.buf) == 0 || r.buf[0].Offset > off) {
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.topic: {r.part: {Epoch: -1, Offset: off}}})
		r.buf, r.pos = nil, off
	}
	for {
		for len(r.buf) > 0 && r.buf[0].Offset < off {
			r.buf = r.buf[1:]
		}
		if len(r.buf) > 0 {
			return r.buf[0], nil
		}
		if err := r.poll(ctx, off); err != nil {
			return nil, err
		}
	}
}

// poll fetches more records; no record within the timeout, or a fetch
// error, is an error.
func (r *partReader) poll(ctx context.Context, off int64) error {
	pctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	fs := r.cl.PollRecords(pctx, 4*rereadChunk)
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
			continue
		}
		return fmt.Errorf("fetch %s/%d at offset %d: %w", fe.Topic, fe.Partition, off, fe.Err)
	}
	n := 0
	fs.EachRecord(func(rec *kgo.Record) {
		if rec.Topic == r.topic && rec.Partition == r.part {
			r.buf = append(r.buf, rec)
			r.pos = max(r.pos, rec.Offset+1)
			n++
		}
	})
	if n == 0 && pctx.Err() != nil {
		return fmt.Errorf("no record from the brokers within %s reading %s/%d at offset %d", r.timeout, r.topic, r.part, off)
	}
	return nil
}

// start lists the partition's log start offset now.
func (r *partReader) start(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	os, err := r.adm.ListStartOffsets(ctx, r.topic)
	if err != nil {
		return 0, fmt.Errorf("list start offsets: %w", err)
	}
	o, ok := os.Lookup(r.topic, r.part)
	if !ok || o.Err != nil {
		return 0, fmt.Errorf("start offset of %s/%d: %v", r.topic, r.part, o.Err)
	}
	return o.Offset, nil
}

package ledger

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// signer is a log's checkpoint signer: its goroutine (loop) signs the
// committed tree once it grew, at most once per checkpoint interval; the
// writer goroutine signs through it too, at start, on CreateLog and at
// close (signNow). Signing off the writer goroutine keeps the checkpoint's
// Pebble write and its file's fsyncs out of the commits' way: appends go
// on being committed (and acknowledged) meanwhile.
type signer struct {
	l *Log
	// mu serializes signing with the writer's reload after a failed
	// commit and with Forked. It guards pinned and lastSign.
	mu sync.Mutex
	// pinned is the checkpoint the log's checkpoint file holds: the latest
	// one signed. Guarded by mu (Open sets it before the goroutines
	// start).
	pinned   *SignedCheckpoint
	lastSign time.Time     // when the latest checkpoint of entries was signed
	grew     chan struct{} // the writer's nudge: the tree grew
	// awaiting holds the acknowledged requests no checkpoint covers yet
	// (for the checkpoint latency metric).
	awMu     sync.Mutex
	awaiting []awaiting
}

// awaiting is an acknowledged request not yet covered by a checkpoint: its
// enqueue time and covering size.
type awaiting struct {
	size uint64
	enq  time.Time
}

func newSigner(l *Log) signer {
	return signer{l: l, grew: make(chan struct{}, 1)}
}

// nudge tells the signer the committed tree grew. It never blocks: a
// nudge already pending covers this one.
func (sg *signer) nudge() {
	select {
	case sg.grew <- struct{}{}:
	default:
	}
}

// loop is the signer goroutine: once the tree has grown, it waits out the
// checkpoint interval since the latest checkpoint of entries was signed
// and signs the committed tree, until the store closes.
func (sg *signer) loop() {
	quit := sg.l.s.quit
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-sg.grew:
		case <-quit:
			return
		}
		if wait := sg.wait(); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-quit:
				return
			}
		}
		sg.signNow()
	}
}

// wait is how long the checkpoint interval still runs.
func (sg *signer) wait() time.Duration {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	return sg.l.s.opts.checkpointInterval - time.Since(sg.lastSign)
}

// signNow signs a checkpoint if the committed tree is ahead of the latest
// one.
func (sg *signer) signNow() {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if sg.needsCheckpoint() {
		sg.sign()
	}
}

// needsCheckpoint reports whether the committed tree is ahead of the
// latest checkpoint (or the log exists without one) and the log may sign.
func (sg *signer) needsCheckpoint() bool {
	l := sg.l
	size := l.committed.Load().size
	cp := l.cp.Load()
	st := l.st.state()
	if st.readOnly != nil || st.failed != nil {
		return false
	}
	if cp == nil {
		// A log that exists signs a checkpoint even while empty.
		return size > 0 || st.persisted
	}
	return cp.Size < size
}

// sign signs, stores and publishes a checkpoint of the committed tree; the
// caller holds mu. The note is stored in Pebble and written to the
// checkpoint file (see keep), and only once the file is durable published
// (served, waited for): the file is never behind a published checkpoint.
func (sg *signer) sign() {
	l := sg.l
	if l.st.state().readOnly != nil {
		return
	}
	// The committed tree: durable, and only ever grown by the writer (a
	// reload after a failed commit restores it from storage under mu).
	st := l.committed.Load()
	start := time.Now()
	// Never sign a checkpoint inconsistent with the latest one signed, the
	// one the checkpoint file holds (pinned): not below its size, and at
	// its size only with its root. Above its size the tree's root at
	// pinned.Size is pinned.Root without reading it again: admit proved
	// it from the stored tiles when the tree was loaded (at open, and at
	// every reload after a failed commit), and since then the writer has
	// only appended leaves to its compact range, which leaves the first
	// pinned.Size leaves, and so that root, unchanged. Each checkpoint
	// signed here becomes the new pin and is of the committed tree, so the
	// argument carries on from one checkpoint to the next.
	if p := sg.pinned; p != nil && (st.size < p.Size || st.size == p.Size && st.root != p.Root) {
		e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
			Detail: fmt.Sprintf("refusing to sign size %d (root %s): the checkpoint file holds the checkpoint signed at size %d with root %s", st.size, st.root, p.Size, p.Root)})
		l.setReadOnly(e)
		sg.lastSign = start
		return
	}
	c := merkle.Checkpoint{Origin: l.Origin(), Size: st.size, Root: st.root}
	n, err := c.Sign(l.s.signer)
	if err == nil {
		err = sg.keep(c.Size, n)
	}
	if err != nil {
		// The tree is durable; the next interval tries again.
		l.s.log.Error("checkpoint not signed", "log", l.name, "size", c.Size, "err", err)
		sg.lastSign = start
		return
	}
	if c.Size > 0 {
		// The empty log's checkpoint does not hold back the first one of
		// entries: that is signed as soon as they are durable. The
		// interval runs from the start of signing, so that checkpoints
		// follow each other every interval however long storing them
		// takes.
		sg.lastSign = start
	}
	scp := &SignedCheckpoint{Checkpoint: c, Note: n}
	sg.pinned = scp
	l.publishCheckpoint(scp)
	now := time.Now()
	l.s.metrics.checkpoints.WithLabelValues(l.name).Inc()
	l.s.metrics.signLat.Observe(now.Sub(start).Seconds())
	sg.observeCovered(c.Size, now)
}

// keep stores a signed checkpoint in Pebble and writes it to the log's
// checkpoint file and guard copy (both at once, see
// checkpointFiles.write). The files are written durably: they are what a
// published checkpoint must never be ahead of. The Pebble write is synced
// too, beside the files' (so it adds no latency of its own): the files
// hold only the latest checkpoint, and a record left to the writer's next
// sync could be lost with a crash after a later checkpoint had replaced
// it in the files, taking a published checkpoint out of the history
// (TestCrashRecovery found one: the writer's next sync covered the WAL up
// to its own batch, written before the record). Open repairs each copy
// from the others (admit): a file newer than the stored history is stored
// again, a stored checkpoint or a file newer than another file is written
// to it, each before it is published.
func (sg *signer) keep(size uint64, note []byte) error {
	l := sg.l
	fileErr := make(chan error, 1)
	go func() { fileErr <- l.s.cpFiles.write(l.name, note) }()
	err := l.s.write(func() error { return l.s.db.Set(checkpointKey(l.id, size), note, pebble.Sync) })
	if ferr := <-fileErr; err == nil {
		err = ferr
	}
	return err
}

// acked records the group's acknowledged requests, durable in the tree of
// size, as waiting for a checkpoint (for the checkpoint latency metric).
func (sg *signer) acked(size uint64, group []*appendReq) {
	sg.awMu.Lock()
	defer sg.awMu.Unlock()
	for _, r := range group {
		if r.err == nil {
			sg.awaiting = append(sg.awaiting, awaiting{size: size, enq: r.enq})
		}
	}
}

// observeCovered records the checkpoint latency of the acknowledged
// requests the checkpoint of size covers.
func (sg *signer) observeCovered(size uint64, now time.Time) {
	sg.awMu.Lock()
	defer sg.awMu.Unlock()
	k := 0
	for _, a := range sg.awaiting {
		if a.size <= size {
			sg.l.s.metrics.cpLat.Observe(now.Sub(a.enq).Seconds())
			continue
		}
		sg.awaiting[k] = a
		k++
	}
	sg.awaiting = sg.awaiting[:k]
}

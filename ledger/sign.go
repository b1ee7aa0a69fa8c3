package ledger

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

func (l *Log) parseCheckpoint(note []byte) (*SignedCheckpoint, error) {
	c, err := merkle.OpenCheckpoint(note, l.s.verifier, l.Origin())
	if err != nil {
		return nil, fmt.Errorf("stored checkpoint: %w", err)
	}
	return &SignedCheckpoint{Checkpoint: c, Note: append([]byte(nil), note...)}, nil
}

// nudgeSigner tells the signer the committed tree grew. It never blocks:
// a nudge already pending covers this one.
func (l *Log) nudgeSigner() {
	select {
	case l.grew <- struct{}{}:
	default:
	}
}

// signLoop is the log's signer goroutine: once the tree has grown, it
// waits out the checkpoint interval since the latest checkpoint of
// entries was signed and signs the committed tree, until the store
// closes. Signing here rather than on the writer goroutine keeps the
// checkpoint's Pebble write and its file's fsyncs out of the commits'
// way: appends go on being committed (and acknowledged) meanwhile.
func (l *Log) signLoop() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-l.grew:
		case <-l.s.quit:
			return
		}
		l.signMu.Lock()
		wait := l.s.opts.checkpointInterval - time.Since(l.lastSign)
		l.signMu.Unlock()
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.s.quit:
				return
			}
		}
		l.signIfNeeded()
	}
}

// signIfNeeded signs a checkpoint if the committed tree is ahead of the
// latest one.
func (l *Log) signIfNeeded() {
	l.signMu.Lock()
	defer l.signMu.Unlock()
	if l.needsCheckpoint() {
		l.sign()
	}
}

// sign signs, stores and publishes a checkpoint of the committed tree; the
// caller holds signMu. The note is stored in Pebble and written to the
// checkpoint file (see keep), and only once the file is durable published
// (served, waited for): the file is never behind a published checkpoint.
func (l *Log) sign() {
	if l.readOnly.Load() != nil {
		return
	}
	// The committed tree: durable, and only ever grown by the writer (a
	// reload after a failed commit restores it from storage under signMu).
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
	if p := l.pinned; p != nil && (st.size < p.Size || st.size == p.Size && st.root != p.Root) {
		e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
			Detail: fmt.Sprintf("refusing to sign size %d (root %s): the checkpoint file holds the checkpoint signed at size %d with root %s", st.size, st.root, p.Size, p.Root)})
		l.setReadOnly(e)
		l.lastSign = start
		return
	}
	c := merkle.Checkpoint{Origin: l.Origin(), Size: st.size, Root: st.root}
	n, err := c.Sign(l.s.signer)
	if err == nil {
		err = l.keep(c.Size, n)
	}
	if err != nil {
		// The tree is durable; the next interval tries again.
		l.s.log.Error("checkpoint not signed", "log", l.name, "size", c.Size, "err", err)
		l.lastSign = start
		return
	}
	if c.Size > 0 {
		// The empty log's checkpoint does not hold back the first one of
		// entries: that is signed as soon as they are durable. The
		// interval runs from the start of signing, so that checkpoints
		// follow each other every interval however long storing them
		// takes.
		l.lastSign = start
	}
	scp := &SignedCheckpoint{Checkpoint: c, Note: n}
	l.pinned = scp
	l.cp.Store(scp)
	l.wakeWaiters()
	now := time.Now()
	l.s.metrics.checkpoints.WithLabelValues(l.name).Inc()
	l.s.metrics.signLat.Observe(now.Sub(start).Seconds())
	l.observeCovered(c.Size, now)
}

// wakeWaiters wakes WaitCheckpoint's waiters: a checkpoint was published,
// or the log will sign none any more.
func (l *Log) wakeWaiters() {
	l.cpMu.Lock()
	close(l.cpNext)
	l.cpNext = make(chan struct{})
	l.cpMu.Unlock()
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
func (l *Log) keep(size uint64, note []byte) error {
	fileErr := make(chan error, 1)
	go func() { fileErr <- l.s.cpFiles.write(l.name, note) }()
	err := l.s.write(func() error { return l.s.db.Set(checkpointKey(l.id, size), note, pebble.Sync) })
	if ferr := <-fileErr; err == nil {
		err = ferr
	}
	return err
}

// observeCovered records the checkpoint latency of the acknowledged
// requests the checkpoint of size covers.
func (l *Log) observeCovered(size uint64, now time.Time) {
	l.awMu.Lock()
	defer l.awMu.Unlock()
	k := 0
	for _, a := range l.awaiting {
		if a.size <= size {
			l.s.metrics.cpLat.Observe(now.Sub(a.enq).Seconds())
			continue
		}
		l.awaiting[k] = a
		k++
	}
	l.awaiting = l.awaiting[:k]
}

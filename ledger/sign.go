package ledger

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

func (l *Log) latestStoredCheckpoint() (*SignedCheckpoint, error) {
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: checkpointKey(l.id, 0), UpperBound: logKey(kindCheckpoint, l.id+1, 0)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if !it.Last() {
		return nil, it.Error()
	}
	return l.parseCheckpoint(it.Value())
}

func (l *Log) parseCheckpoint(note []byte) (*SignedCheckpoint, error) {
	c, err := merkle.OpenCheckpoint(note, l.s.verifier, l.Origin())
	if err != nil {
		return nil, fmt.Errorf("stored checkpoint: %w", err)
	}
	return &SignedCheckpoint{Checkpoint: c, Note: append([]byte(nil), note...)}, nil
}

// sign signs, stores and publishes a checkpoint of the committed tree. The
// order makes a crash between any two steps safe: the note is stored in
// Pebble, then written to the checkpoint file, and only then published
// (served, waited for). A crash before the file write leaves a stored
// checkpoint newer than the file, which Open writes to the file before
// publishing it (admit); the file is never behind a published checkpoint.
func (l *Log) sign() {
	w := &l.w
	if l.readOnly.Load() != nil {
		return
	}
	// Never sign a checkpoint inconsistent with the latest one signed, the
	// one the checkpoint file holds (pinned): not below its size, and at
	// its size only with its root. Above its size the tree's root at
	// pinned.Size is pinned.Root without reading it again: admit proved
	// it from the stored tiles when the tree was loaded (at open, and at
	// every reload after a failed commit), and since then the writer has
	// only appended leaves to its compact range, which leaves the first
	// pinned.Size leaves, and so that root, unchanged. Each checkpoint
	// signed here becomes the new pin and is of the current tree, so the
	// argument carries on from one checkpoint to the next.
	if p := l.pinned; p != nil && (w.size < p.Size || w.size == p.Size && w.root != p.Root) {
		e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
			Detail: fmt.Sprintf("refusing to sign size %d (root %s): the checkpoint file holds the checkpoint signed at size %d with root %s", w.size, w.root, p.Size, p.Root)})
		l.setReadOnly(e)
		w.lastSign = time.Now()
		return
	}
	c := merkle.Checkpoint{Origin: l.Origin(), Size: w.size, Root: w.root}
	n, err := c.Sign(l.s.signer)
	if err == nil {
		err = l.s.db.Set(checkpointKey(l.id, c.Size), n, pebble.Sync)
	}
	if err == nil {
		err = l.s.cpFiles.write(l.name, n)
	}
	if err != nil {
		// The tree is durable; the next interval tries again.
		l.s.log.Error("checkpoint not signed", "log", l.name, "size", c.Size, "err", err)
		w.lastSign = time.Now()
		return
	}
	now := time.Now()
	if c.Size > 0 {
		// The empty log's checkpoint does not hold back the first one of
		// entries: that is signed as soon as they are durable.
		w.lastSign = now
	}
	scp := &SignedCheckpoint{Checkpoint: c, Note: n}
	l.pinned = scp
	l.cp.Store(scp)
	l.cpMu.Lock()
	close(l.cpNext)
	l.cpNext = make(chan struct{})
	l.cpMu.Unlock()
	m := l.s.metrics
	m.checkpoints.WithLabelValues(l.name).Inc()
	k := 0
	for _, a := range w.awaiting {
		if a.size <= c.Size {
			m.cpLat.Observe(now.Sub(a.enq).Seconds())
			continue
		}
		w.awaiting[k] = a
		k++
	}
	w.awaiting = w.awaiting[:k]
}

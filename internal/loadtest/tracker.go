package loadtest

import (
	"sync"
	"time"
)

// CheckpointTracker times each add from its start to the first signed
// checkpoint that covers it: the latency a client waiting for its proof
// sees. Adds report the tree size their ack returned (Acked); a watcher
// reports each new checkpoint as it sees it (Checkpoint). Both may come
// first: an add whose size a checkpoint seen earlier already covers is
// timed to when that checkpoint was seen. Safe for concurrent use.
type CheckpointTracker struct {
	mu       sync.Mutex
	pending  []cpWait
	lat      Latencies
	fromAck  Latencies // ack to checkpoint, of the adds AckedAt timed
	lastSize uint64    // the newest checkpoint seen
	lastAt   time.Time // when it was seen
}

type cpWait struct {
	size  uint64
	start time.Time
	acked time.Time // zero: not timed from the ack
}

// Acked records an add that started at start and was acknowledged at tree
// size size (its last entry is at index size-1).
func (t *CheckpointTracker) Acked(size uint64, start time.Time) { t.AckedAt(size, start, time.Time{}) }

// AckedAt is Acked with the time the ack arrived, so that the add is also
// timed from its ack to the covering checkpoint (FromAck). A checkpoint
// seen before the ack arrived counts as 0.
func (t *CheckpointTracker) AckedAt(size uint64, start, acked time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if size <= t.lastSize {
		// The covering checkpoint was seen before the ack was.
		t.lat.Add(t.lastAt.Sub(start))
		if !acked.IsZero() {
			t.fromAck.Add(max(0, t.lastAt.Sub(acked)))
		}
		return
	}
	t.pending = append(t.pending, cpWait{size, start, acked})
}

// Checkpoint records a checkpoint of size size seen at at. Older (smaller)
// checkpoints seen late time nothing new.
func (t *CheckpointTracker) Checkpoint(size uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if size > t.lastSize {
		t.lastSize, t.lastAt = size, at
	}
	k := 0
	for _, w := range t.pending {
		if w.size <= size {
			t.lat.Add(at.Sub(w.start))
			if !w.acked.IsZero() {
				t.fromAck.Add(max(0, at.Sub(w.acked)))
			}
			continue
		}
		t.pending[k] = w
		k++
	}
	t.pending = t.pending[:k]
}

// Waiting is the number of adds no checkpoint has covered yet.
func (t *CheckpointTracker) Waiting() int { t.mu.Lock(); defer t.mu.Unlock(); return len(t.pending) }

// Latencies are the add-to-checkpoint times of the covered adds.
func (t *CheckpointTracker) Latencies() *Latencies { return &t.lat }

// FromAck are the ack-to-checkpoint times of the covered adds AckedAt
// timed: how long a client that has its ack waits for a checkpoint that
// proves it.
func (t *CheckpointTracker) FromAck() *Latencies { return &t.fromAck }

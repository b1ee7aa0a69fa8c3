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
	lastSize uint64    // the newest checkpoint seen
	lastAt   time.Time // when it was seen
}

type cpWait struct {
	size  uint64
	start time.Time
}

// Acked records an add that started at start and was acknowledged at tree
// size size (its last entry is at index size-1).
func (t *CheckpointTracker) Acked(size uint64, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if size <= t.lastSize {
		// The covering checkpoint was seen before the ack was.
		t.lat.Add(t.lastAt.Sub(start))
		return
	}
	t.pending = append(t.pending, cpWait{size, start})
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

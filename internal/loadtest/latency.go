package loadtest

import (
	"slices"
	"sync"
	"time"
)

// Latencies collects durations, from any goroutine, and reports their
// percentiles.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

// Merge adds every duration of o.
func (l *Latencies) Merge(o *Latencies) {
	o.mu.Lock()
	d := slices.Clone(o.d)
	o.mu.Unlock()
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

// Len is the number of durations recorded.
func (l *Latencies) Len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.d) }

// Pct returns the p-quantile (0 <= p <= 1) by the nearest rank below:
// the duration at index floor(p*(n-1)) of the sorted durations, so Pct(0)
// is the least and Pct(1) the greatest. It is 0 with no durations.
func (l *Latencies) Pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[int(p*float64(len(l.d)-1))]
}

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

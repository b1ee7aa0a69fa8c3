package checkers_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// BenchmarkPeerForkDetection measures the time to detect a fork: from
// the moment a peer publishes a signed checkpoint that forks from ours to
// the end of the pass of our Runner that finds it (when the daemon raises
// the alert), with the peer check scheduled as the daemon schedules it
// (interval I, jitter I/10, 100 logs/s). Each iteration is a fresh pair of
// real ledgers on loopback agreeing on 1,000 entries of ours and 500 of
// the peer's; at a random moment of the schedule the peer appends 500
// entries that differ from ours and signs them. ns/op is meaningless
// (setup included); the figures are ms-mean and ms-max.
func BenchmarkPeerForkDetection(b *testing.B) {
	for _, interval := range []time.Duration{100 * time.Millisecond, time.Second} {
		b.Run("interval="+interval.String(), func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				took = append(took, detectFork(b, interval))
			}
			var total time.Duration
			for _, d := range took {
				total += d
			}
			b.ReportMetric(float64(total.Microseconds())/float64(len(took))/1000, "ms-mean")
			b.ReportMetric(float64(slices.Max(took).Microseconds())/1000, "ms-max")
		})
	}
}

func detectFork(b *testing.B, interval time.Duration) time.Duration {
	key := newKey(b)
	us, peer := newPeerNode(b, key), newPeerNode(b, key)
	us.fill(b, peerLog, 0, 1000, honestEntry)
	peer.fill(b, peerLog, 0, 500, honestEntry)
	pc, err := checkers.NewPeerCheck(us.store, []checkers.Peer{peer.peer()})
	if err != nil {
		b.Fatal(err)
	}
	kv, err := us.store.Bucket("checks")
	if err != nil {
		b.Fatal(err)
	}
	passes, forks := make(chan struct{}, 100), make(chan time.Time, 100)
	r := checkers.NewRunner(kv, checkers.Options{Logger: quietLogger(), OnPass: func(pr checkers.PassResult) {
		for k := range pr.Counts {
			if k.Kind == ledger.IntegrityFork {
				forks <- time.Now()
				return
			}
		}
		if pr.Run.Error != "" {
			b.Errorf("pass: %s", pr.Run.Error)
		}
		passes <- struct{}{}
	}})
	if err := r.Register(pc, checkers.Schedule{Interval: interval, Jitter: interval / 10, Rate: 100}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-passes // a first pass, which agrees
	time.Sleep(time.Duration(rand.Int64N(int64(interval))))
	// One append and one checkpoint: the first signed tree that forks.
	l, err := peer.store.LogForAppend(peerLog)
	if err != nil {
		b.Fatal(err)
	}
	es := make([]ledger.Entry, 500)
	for i := range es {
		es[i] = forkedEntry(500)(500 + i)
	}
	if _, err := l.Append(ctx, es); err != nil {
		b.Fatal(err)
	}
	// The moment it is published, to 50µs (WaitCheckpoint may return
	// later than that).
	for cp := l.Checkpoint(); cp == nil || cp.Size < 1000; cp = l.Checkpoint() {
		time.Sleep(50 * time.Microsecond)
	}
	signed := time.Now()
	return (<-forks).Sub(signed)
}

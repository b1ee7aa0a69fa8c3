package loadtest

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Drive runs jobs 0..jobs-1 on workers goroutines, fn(worker, job) each,
// every job once, with progress counted in units per job and printed to
// stderr every few seconds under name. It stops handing out jobs at the
// first error, which it returns with the time the jobs took.
func Drive(name string, workers, jobs int, units int64, fn func(worker, job int) error) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Bool
	prog := NewProgress(name, int64(jobs)*units)
	errc := make(chan error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !failed.Load() {
				j := next.Add(1) - 1
				if j >= int64(jobs) {
					return
				}
				if err := fn(w, int(j)); err != nil {
					failed.Store(true)
					errc <- err
					return
				}
				prog.Add(units)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.Done()
	select {
	case err := <-errc:
		return elapsed, err
	default:
		return elapsed, nil
	}
}

// Progress prints "name: n/total (p%), r/s" to stderr every 5 seconds
// until Done.
type Progress struct {
	name  string
	total int64
	n     atomic.Int64
	out   io.Writer
	stop  chan struct{}
	wg    sync.WaitGroup
}

// NewProgress starts printing the progress of total units.
func NewProgress(name string, total int64) *Progress {
	p := &Progress{name: name, total: total, out: os.Stderr, stop: make(chan struct{})}
	p.wg.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				n := p.n.Load()
				fmt.Fprintf(p.out, "%s: %d/%d (%.0f%%), %.0f/s\n", p.name, n, p.total, 100*float64(n)/float64(p.total), float64(n)/time.Since(start).Seconds())
			}
		}
	})
	return p
}

// Add counts n more units done.
func (p *Progress) Add(n int64) { p.n.Add(n) }

// Done stops the printing.
func (p *Progress) Done() { close(p.stop); p.wg.Wait() }

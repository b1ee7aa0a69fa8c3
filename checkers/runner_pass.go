package checkers

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// progress is a pass's Progress: the throttle, the count, the findings.
type progress struct {
	r       *Runner
	name    string
	started time.Time
	bucket  *tokenBucket
	checked atomic.Uint64

	mu       sync.Mutex
	done     bool
	findings []Finding
	total    int
	counts   map[LogKind]int
}

var _ Progress = (*progress)(nil)

func (p *progress) Checked(ctx context.Context, n int) error {
	if n > 0 {
		p.checked.Add(uint64(n))
		p.r.m.entries.WithLabelValues(p.name).Add(float64(n))
	}
	return p.bucket.take(ctx, n)
}

func (p *progress) Found(f Finding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return // a goroutine of a pass that has returned
	}
	p.total++
	p.counts[LogKind{f.Log, f.Kind}]++
	if len(p.findings) < MaxFindings {
		p.findings = append(p.findings, f)
	}
	p.r.m.findingsTotal.WithLabelValues(p.name, f.Kind).Inc()
	if p.total <= maxLoggedFindings {
		p.r.log.Error("integrity finding", "checker", p.name, "finding", f.String())
	}
}

// maxLoggedFindings bounds the findings a pass logs one by one; the pass's
// summary line counts them all.
const maxLoggedFindings = 100

// pass runs one pass of j and records it.
func (r *Runner) pass(ctx context.Context, j *job) (Run, error) {
	j.passMu.Lock()
	defer j.passMu.Unlock()
	name := j.c.Name()
	p := &progress{r: r, name: name, started: r.clock.Now(), counts: map[LogKind]int{},
		bucket: newTokenBucket(r.clock, j.s.Rate)}
	j.mu.Lock()
	j.current = p
	j.mu.Unlock()
	r.log.Info("check pass started", "checker", name)
	err := runChecker(ctx, j.c, p)
	end := r.clock.Now()
	p.mu.Lock()
	p.done = true
	findings, total, counts := p.findings, p.total, p.counts
	p.mu.Unlock()
	run := Run{StartedAt: p.started.UTC(), EndedAt: end.UTC(), DurationSeconds: end.Sub(p.started).Seconds(),
		EntriesChecked: p.checked.Load(), FindingsCount: total}
	switch {
	case err != nil && ctx.Err() != nil:
		run.Result, run.Error = ResultCanceled, err.Error()
	case err != nil:
		run.Result, run.Error = ResultError, err.Error()
	case total > 0:
		run.Result = ResultFindings
	default:
		run.Result = ResultOK
	}
	r.m.runs.WithLabelValues(name, run.Result).Inc()

	j.mu.Lock()
	j.current = nil
	if run.Result != ResultCanceled {
		rec := j.rec
		rec.LastRun = &run
		rec.LastFindings = nil
		if err != nil {
			rec.LastFindings = findings
		} else {
			rec.LastSuccess = run.StartedAt
			rec.Findings = findings
			rec.ByKind = map[string]int{}
			for k, n := range counts {
				rec.ByKind[k.Kind] += n
			}
		}
		j.rec = rec
		r.m.update(name, &rec)
		if v, merr := json.Marshal(rec); merr != nil {
			r.log.Error("checker record not encoded", "checker", name, "err", merr)
		} else if serr := r.kv.Set(stateKey(name), v); serr != nil {
			r.log.Error("checker record not stored", "checker", name, "err", serr)
		}
	}
	j.mu.Unlock()

	logArgs := []any{"checker", name, "result", run.Result, "entries", run.EntriesChecked,
		"findings", total, "duration", end.Sub(p.started).Round(time.Millisecond)}
	switch run.Result {
	case ResultError:
		r.log.Error("check pass failed", append(logArgs, "err", err)...)
	case ResultFindings:
		r.log.Error("check pass found integrity failures", logArgs...)
	case ResultCanceled:
		r.log.Info("check pass stopped", logArgs...)
	default:
		r.log.Info("check pass done", logArgs...)
	}
	if r.opts.OnPass != nil && (run.Result != ResultCanceled || total > 0) {
		r.opts.OnPass(PassResult{Checker: name, Complete: err == nil, Run: run,
			Findings: slices.Clone(findings), Counts: counts})
	}
	if err != nil {
		return run, fmt.Errorf("checkers: %s: %w", name, err)
	}
	return run, nil
}

// runChecker runs c, turning a panic into an error: a broken checker must
// not take the daemon down.
func runChecker(ctx context.Context, c Checker, p Progress) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("checker panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return c.Run(ctx, p)
}

// tokenBucket throttles a pass to rate entries per second with a burst of
// a tenth of a second's worth. Callers that take more than there is wait
// for the debt to refill; concurrent callers queue behind each other's
// debt, so the rate holds for the pass as a whole.
type tokenBucket struct {
	clock  Clock
	rate   float64
	burst  float64
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newTokenBucket(c Clock, rate float64) *tokenBucket {
	b := &tokenBucket{clock: c, rate: rate, burst: max(1, rate/10)}
	b.tokens, b.last = b.burst, c.Now()
	return b
}

func (b *tokenBucket) take(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.rate <= 0 {
		return nil
	}
	n = max(n, 1)
	b.mu.Lock()
	now := b.clock.Now()
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	var wait time.Duration
	if b.tokens < 0 {
		wait = time.Duration(-b.tokens / b.rate * float64(time.Second))
	}
	b.mu.Unlock()
	if wait > 0 {
		return b.clock.Sleep(ctx, wait)
	}
	return nil
}

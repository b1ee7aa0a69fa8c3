package checkers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/auditd/auditd/ledger"
)

// ErrUnknownChecker is returned for a name no registered checker has.
var ErrUnknownChecker = errors.New("checkers: unknown checker")

// KV is the durable keyspace the Runner keeps each checker's last pass in,
// such as a [ledger.Bucket]. Set must be durable when it returns; Get
// returns an error wrapping [ledger.ErrNotFound] for a missing key.
type KV interface {
	Get(key []byte) ([]byte, error)
	Set(key, value []byte) error
}

var _ KV = (*ledger.Bucket)(nil)

// Clock is the time the Runner's throttle and records use. Sleep waits d
// or until ctx ends, returning ctx's error then.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Schedule says when and how fast a checker runs.
type Schedule struct {
	// Interval is the time between the starts of two full passes; a pass
	// that takes longer is followed at once. 0 runs the checker only on
	// demand (Runner.Trigger, RunNow).
	Interval time.Duration
	// Jitter delays each scheduled start by a random duration in [0,
	// Jitter), so instances restarted together do not scrub together.
	Jitter time.Duration
	// Rate bounds the entries a pass checks per second (the throttle
	// Progress.Checked blocks on); 0 is unthrottled. A Checked call with
	// n = 0, a unit of work that reads no entry (the checkpoint audit
	// calls it once per checkpoint), costs one.
	Rate float64
}

// MaxFindings bounds the findings a pass keeps (stored, served, passed to
// OnPass); counts and metrics stay exact beyond it.
const MaxFindings = 1000

// Results of a pass (the result label of checks_runs_total).
const (
	ResultOK       = "ok"       // completed, found nothing
	ResultFindings = "findings" // completed, found something
	ResultError    = "error"    // could not finish
	ResultCanceled = "canceled" // stopped by shutdown; not recorded
)

// Run is the record of one pass.
type Run struct {
	StartedAt       time.Time `json:"started_at"`
	EndedAt         time.Time `json:"ended_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	EntriesChecked  uint64    `json:"entries_checked"`
	// Result is ok, findings or error.
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// FindingsCount is the number of findings of the pass (partial when it
	// failed); at most MaxFindings of them are kept.
	FindingsCount int `json:"findings_count"`
}

// LogKind is the key findings are counted and alerted by.
type LogKind struct{ Log, Kind string }

// PassResult is what Options.OnPass is told after a pass.
type PassResult struct {
	Checker string
	// Complete is true when the pass ran to its end. The findings of an
	// incomplete pass (it failed or was stopped) are those found before
	// it stopped and say nothing about the rest.
	Complete bool
	Run      Run
	// Findings are the pass's findings, at most MaxFindings.
	Findings []Finding
	// Counts are the exact numbers of findings by log and kind.
	Counts map[LogKind]int
}

// Options configure a Runner. The zero value is usable.
type Options struct {
	Logger *slog.Logger
	// Clock is the time of the throttle and the records (default: the
	// system's). The schedule itself waits on real timers.
	Clock Clock
	// Rand returns a number in [0, 1) for the jitter (default
	// math/rand/v2).
	Rand func() float64
	// OnPass, if set, is called after every pass that ended (not one
	// stopped by shutdown with nothing found), from the goroutine that ran
	// it: the daemon raises the findings as alerts and resolves those a
	// complete pass no longer reports.
	OnPass func(PassResult)
}

// Runner runs registered checkers on their schedules, throttled, keeps the
// record of each checker's last pass in a KV so it survives a restart,
// exports metrics and tells OnPass of every pass. Passes of one checker
// never overlap; different checkers run independently. It is safe for
// concurrent use.
type Runner struct {
	kv    KV
	opts  Options
	log   *slog.Logger
	clock Clock
	m     *metrics

	mu    sync.Mutex
	jobs  map[string]*job
	names []string
}

type job struct {
	c       Checker
	s       Schedule
	trigger chan struct{}
	passMu  sync.Mutex // held for the length of a pass

	mu      sync.Mutex
	rec     record
	next    time.Time
	current *progress // the running pass, nil when idle
}

// record is what the KV keeps of a checker.
type record struct {
	// LastRun is the last pass that ended (completed or failed).
	LastRun *Run `json:"last_run,omitempty"`
	// LastFindings are LastRun's findings when it failed (partial).
	LastFindings []Finding `json:"last_findings,omitempty"`
	// LastSuccess is the start of the last completed pass.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Findings and ByKind are those of the last completed pass.
	Findings []Finding      `json:"findings"`
	ByKind   map[string]int `json:"by_kind,omitempty"`
}

func stateKey(name string) []byte { return []byte("checker/" + name) }

// NewRunner returns a Runner keeping its records in kv.
func NewRunner(kv KV, opts Options) *Runner {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	return &Runner{kv: kv, opts: opts, log: opts.Logger, clock: opts.Clock, m: newMetrics(), jobs: map[string]*job{}}
}

// Register adds a checker with its schedule and loads its last record.
// Names must be unique. Register before Run.
func (r *Runner) Register(c Checker, s Schedule) error {
	name := c.Name()
	if name == "" {
		return errors.New("checkers: a checker needs a name")
	}
	if s.Interval < 0 || s.Jitter < 0 || s.Rate < 0 {
		return fmt.Errorf("checkers: %s: interval, jitter and rate must not be negative", name)
	}
	j := &job{c: c, s: s, trigger: make(chan struct{}, 1)}
	v, err := r.kv.Get(stateKey(name))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		return fmt.Errorf("checkers: load %s: %w", name, err)
	default:
		if err := json.Unmarshal(v, &j.rec); err != nil {
			// A record that does not decode is not worth refusing to start
			// over: the next pass writes a fresh one.
			r.log.Error("checker record unreadable; starting afresh", "checker", name, "err", err)
			j.rec = record{}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.jobs[name]; dup {
		return fmt.Errorf("checkers: two checkers named %q", name)
	}
	r.jobs[name] = j
	r.names = append(r.names, name)
	sort.Strings(r.names)
	ks := kinds
	if k, ok := c.(FindingKinder); ok {
		ks = k.FindingKinds()
	}
	r.m.register(name, s, &j.rec, ks)
	return nil
}

func (r *Runner) job(name string) (*job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownChecker, name)
	}
	return j, nil
}

func (r *Runner) all() []*job {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*job, len(r.names))
	for i, n := range r.names {
		out[i] = r.jobs[n]
	}
	return out
}

// Run runs every checker on its schedule until ctx ends; a pass in
// progress is then stopped (its Checked calls return ctx's error) and Run
// returns when all have.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, j := range r.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, j)
		}()
	}
	wg.Wait()
}

// nextStart is when the pass after one that started at last (zero: none
// yet) starts, at now, with u in [0, 1) drawing the jitter: a full
// interval after last, or now if that is past, plus u*Jitter.
func nextStart(s Schedule, last, now time.Time, u float64) time.Time {
	j := time.Duration(u * float64(s.Jitter))
	if last.IsZero() {
		return now.Add(j)
	}
	t := last.Add(s.Interval)
	if t.Before(now) {
		t = now
	}
	return t.Add(j)
}

func (r *Runner) loop(ctx context.Context, j *job) {
	for {
		var due <-chan time.Time
		var timer *time.Timer
		if j.s.Interval > 0 {
			j.mu.Lock()
			var last time.Time
			if j.rec.LastRun != nil {
				last = j.rec.LastRun.StartedAt
			}
			now := time.Now()
			j.next = nextStart(j.s, last, now, r.opts.Rand())
			j.mu.Unlock()
			timer = time.NewTimer(j.next.Sub(now))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-due:
		case <-j.trigger:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		j.mu.Lock()
		j.next = time.Time{}
		j.mu.Unlock()
		if _, err := r.pass(ctx, j); err != nil && ctx.Err() != nil {
			return
		}
	}
}

// Trigger asks for a pass of the named checker as soon as it is not
// running (the Run loop starts it). Requests made while one is queued
// merge.
func (r *Runner) Trigger(name string) error {
	j, err := r.job(name)
	if err != nil {
		return err
	}
	select {
	case j.trigger <- struct{}{}:
	default:
	}
	return nil
}

// RunNow makes a pass of the named checker now, after any pass of it in
// progress, and returns its record. The error is the pass's (also in the
// record) or ctx's.
func (r *Runner) RunNow(ctx context.Context, name string) (Run, error) {
	j, err := r.job(name)
	if err != nil {
		return Run{}, err
	}
	return r.pass(ctx, j)
}

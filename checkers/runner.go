package checkers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	r.m.register(name, s, &j.rec)
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

// Status is a checker's state, served by GET /v1/checks.
type Status struct {
	Name string `json:"name"`
	// IntervalSeconds, JitterSeconds and Rate are the schedule (see
	// Schedule); an interval of 0 runs only on demand.
	Interval        string  `json:"interval"`
	IntervalSeconds float64 `json:"interval_seconds"`
	JitterSeconds   float64 `json:"jitter_seconds"`
	Rate            float64 `json:"rate"`
	// State is idle or running.
	State string `json:"state"`
	// NextRunAt is when the next scheduled pass starts (unset while one
	// runs or when unscheduled).
	NextRunAt time.Time `json:"next_run_at,omitzero"`
	// Current is the pass in progress.
	Current *CurrentRun `json:"current,omitempty"`
	// LastRun is the last pass that ended, and LastError its error.
	LastRun   *Run   `json:"last_run,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// LastRunFindings are the findings of a last pass that failed,
	// found before it stopped.
	LastRunFindings []Finding `json:"last_run_findings,omitempty"`
	// LastSuccessAt is the start of the last completed pass.
	LastSuccessAt time.Time `json:"last_success_at,omitzero"`
	// Findings are those of the last completed pass (at most
	// MaxFindings); FindingsByKind counts all of them.
	Findings       []Finding      `json:"findings"`
	FindingsByKind map[string]int `json:"findings_by_kind,omitempty"`
}

// CurrentRun is a pass in progress.
type CurrentRun struct {
	StartedAt      time.Time `json:"started_at"`
	EntriesChecked uint64    `json:"entries_checked"`
}

// Status reports every checker, by name.
func (r *Runner) Status() []Status {
	var out []Status
	for _, j := range r.all() {
		j.mu.Lock()
		st := Status{Name: j.c.Name(), Interval: j.s.Interval.String(), IntervalSeconds: j.s.Interval.Seconds(),
			JitterSeconds: j.s.Jitter.Seconds(), Rate: j.s.Rate, State: "idle",
			LastSuccessAt: j.rec.LastSuccess, FindingsByKind: j.rec.ByKind,
			Findings: slices.Clone(j.rec.Findings), LastRunFindings: slices.Clone(j.rec.LastFindings)}
		if st.Findings == nil {
			st.Findings = []Finding{}
		}
		if j.rec.LastRun != nil {
			run := *j.rec.LastRun
			st.LastRun, st.LastError = &run, run.Error
		}
		if p := j.current; p != nil {
			st.State = "running"
			st.Current = &CurrentRun{StartedAt: p.started.UTC(), EntriesChecked: p.checked.Load()}
		} else if j.s.Interval > 0 && !j.next.IsZero() {
			st.NextRunAt = j.next.UTC()
		}
		j.mu.Unlock()
		out = append(out, st)
	}
	return out
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

// metrics are the Runner's collectors.
type metrics struct {
	runs          *prometheus.CounterVec
	duration      *prometheus.GaugeVec
	entries       *prometheus.CounterVec
	findings      *prometheus.GaugeVec
	findingsTotal *prometheus.CounterVec
	lastSuccess   *prometheus.GaugeVec
	lastFailed    *prometheus.GaugeVec
	interval      *prometheus.GaugeVec

	mu    sync.Mutex
	kinds map[string]map[string]bool // kinds each checker's findings gauge has series for
}

// kinds are the finding kinds whose series exist (at 0) from the start.
var kinds = []string{ledger.IntegrityEntryMissing, ledger.IntegrityEntryCorrupt, ledger.IntegrityLeafMismatch,
	ledger.IntegrityTileMismatch, ledger.IntegrityTileMissing, ledger.IntegrityRootMismatch,
	ledger.IntegrityCheckpointBad, ledger.IntegrityRollback, ledger.IntegrityConsistencyBad}

func newMetrics() *metrics {
	return &metrics{
		kinds: map[string]map[string]bool{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checks_runs_total", Help: "Self-audit passes by checker and result: ok, findings, error (could not finish), canceled (stopped by shutdown).",
		}, []string{"checker", "result"}),
		duration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checks_run_duration_seconds", Help: "Duration of the checker's last pass that ended.",
		}, []string{"checker"}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checks_entries_checked_total", Help: "Entries (or checkpoints) the checker has checked, counted as it goes.",
		}, []string{"checker"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checks_findings", Help: "Integrity findings of the checker's last completed pass, by kind.",
		}, []string{"checker", "kind"}),
		findingsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "checks_findings_total", Help: "Integrity findings of every pass, by checker and kind.",
		}, []string{"checker", "kind"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checks_last_success_timestamp_seconds", Help: "Start of the checker's last completed pass (Unix seconds); absent until one completes.",
		}, []string{"checker"}),
		lastFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checks_last_run_failed", Help: "1 if the checker's last pass that ended could not finish (an error), else 0.",
		}, []string{"checker"}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "checks_interval_seconds", Help: "Time between the starts of the checker's scheduled passes; 0 when it runs only on demand.",
		}, []string{"checker"}),
	}
}

func (m *metrics) register(name string, s Schedule, rec *record) {
	for _, r := range []string{ResultOK, ResultFindings, ResultError, ResultCanceled} {
		m.runs.WithLabelValues(name, r)
	}
	m.entries.WithLabelValues(name)
	for _, k := range kinds {
		m.findingsTotal.WithLabelValues(name, k)
	}
	m.interval.WithLabelValues(name).Set(s.Interval.Seconds())
	m.update(name, rec)
}

// update sets the gauges from rec.
func (m *metrics) update(name string, rec *record) {
	m.mu.Lock()
	seen := m.kinds[name]
	if seen == nil {
		seen = map[string]bool{}
		for _, k := range kinds {
			seen[k] = true
		}
		m.kinds[name] = seen
	}
	for k := range rec.ByKind {
		seen[k] = true
	}
	for k := range seen {
		m.findings.WithLabelValues(name, k).Set(float64(rec.ByKind[k]))
	}
	m.mu.Unlock()
	if !rec.LastSuccess.IsZero() {
		m.lastSuccess.WithLabelValues(name).Set(float64(rec.LastSuccess.UnixNano()) / 1e9)
	}
	failed := 0.0
	if rec.LastRun != nil {
		m.duration.WithLabelValues(name).Set(rec.LastRun.DurationSeconds)
		if rec.LastRun.Result == ResultError {
			failed = 1
		}
	}
	m.lastFailed.WithLabelValues(name).Set(failed)
}

// Collectors returns the Runner's Prometheus collectors, named without the
// auditd_ prefix: checks_runs_total{checker,result},
// checks_run_duration_seconds{checker}, checks_entries_checked_total{checker},
// checks_findings{checker,kind}, checks_findings_total{checker,kind},
// checks_last_success_timestamp_seconds{checker},
// checks_last_run_failed{checker} and checks_interval_seconds{checker}.
func (r *Runner) Collectors() []prometheus.Collector {
	m := r.m
	return []prometheus.Collector{m.runs, m.duration, m.entries, m.findings, m.findingsTotal, m.lastSuccess, m.lastFailed, m.interval}
}

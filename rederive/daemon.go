package rederive

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// ErrUnknownDerivation is returned for a derivation name no job has.
var ErrUnknownDerivation = errors.New("rederive: unknown derivation")

// Daemon runs each job on its schedule: an incremental run every Interval
// and a full fold from zero every FullInterval (which also checks the
// incremental path). Runs of one derivation never overlap.
type Daemon struct {
	runner   *Runner
	jobs     map[string]*daemonJob
	names    []string
	onReport func(Job, *Report)
}

// A DaemonOption configures a Daemon.
type DaemonOption func(*Daemon)

// WithOnReport has fn called after every run, with its report (alerts,
// the invariant check). fn runs on the job's goroutine: the job's next run
// waits for it.
func WithOnReport(fn func(Job, *Report)) DaemonOption { return func(d *Daemon) { d.onReport = fn } }

type daemonJob struct {
	job     Job
	trigger chan bool // full?
	mu      sync.Mutex
	latest  *Report
	running bool
	lastAt  time.Time
}

// NewDaemon returns a daemon for jobs, whose names must be unique.
func NewDaemon(r *Runner, jobs []Job, opts ...DaemonOption) *Daemon {
	d := &Daemon{runner: r, jobs: map[string]*daemonJob{}}
	for _, o := range opts {
		o(d)
	}
	for _, j := range jobs {
		name := j.Derivation.Name()
		dj := &daemonJob{job: j, trigger: make(chan bool, 1)}
		if r.bucket != nil {
			if rep, err := LatestReport(r.bucket, name); err == nil {
				dj.latest = rep
			}
		}
		d.jobs[name] = dj
		d.names = append(d.names, name)
	}
	sort.Strings(d.names)
	return d
}

// Run runs the schedules until ctx ends.
func (d *Daemon) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range d.names {
		wg.Add(1)
		go func(j *daemonJob) {
			defer wg.Done()
			d.loop(ctx, j)
		}(d.jobs[name])
	}
	wg.Wait()
}

func (d *Daemon) loop(ctx context.Context, j *daemonJob) {
	spec := j.job.Spec
	every := time.Duration(spec.Interval)
	if every <= 0 {
		every = time.Minute
	}
	fullEvery := time.Duration(spec.FullInterval)
	if fullEvery < every {
		fullEvery = every
	}
	// The first run continues the saved state (or folds from zero if
	// there is none); the first full run comes after FullInterval.
	nextFull := time.Now().Add(fullEvery)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case full = <-j.trigger:
		case <-timer.C:
		}
		if time.Now().After(nextFull) {
			full = true
		}
		if full {
			nextFull = time.Now().Add(fullEvery)
		}
		j.mu.Lock()
		j.running = true
		j.mu.Unlock()
		rep, err := d.runner.Run(ctx, j.job, full)
		j.mu.Lock()
		j.running = false
		j.lastAt = time.Now()
		if err == nil {
			j.latest = rep
		}
		j.mu.Unlock()
		if err == nil && d.onReport != nil {
			d.onReport(j.job, rep)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(every)
	}
}

// Trigger asks for a run of the named derivation as soon as it is not
// running; full folds from zero. Requests made while one is queued merge.
func (d *Daemon) Trigger(name string, full bool) error {
	j, ok := d.jobs[name]
	if !ok {
		return ErrUnknownDerivation
	}
	select {
	case j.trigger <- full:
	default:
		if full {
			// Upgrade the queued request to a full run.
			select {
			case <-j.trigger:
			default:
			}
			select {
			case j.trigger <- true:
			default:
			}
		}
	}
	return nil
}

// JobInfo summarises a derivation for GET /v1/derivations.
type JobInfo struct {
	Name         string         `json:"name"`
	Sources      []string       `json:"sources"`
	Store        string         `json:"store"`
	Interval     store.Duration `json:"interval"`
	FullInterval store.Duration `json:"full_interval"`
	Running      bool           `json:"running"`
	LastState    string         `json:"last_state,omitempty"`
	// Waiting says why the latest run judged nothing: its sources match
	// no log (state no_source), or no source log is checkpointed yet.
	Waiting   string    `json:"waiting,omitempty"`
	LastRunAt time.Time `json:"last_run_at,omitzero"`
	Confirmed int       `json:"confirmed"`
	Pending   int       `json:"pending"`
	// Skipped counts the events the latest run skipped on derivation
	// errors (within error_budget).
	Skipped int    `json:"skipped_events"`
	File    string `json:"file,omitempty"`
}

// Configured reports true: a Daemon's derivations are the jobs it was
// made with (a reload makes a new Daemon).
func (d *Daemon) Configured() bool { return true }

// Jobs lists the derivations in name order.
func (d *Daemon) Jobs() []JobInfo {
	out := make([]JobInfo, 0, len(d.names))
	for _, name := range d.names {
		j := d.jobs[name]
		s := j.job.Spec
		info := JobInfo{Name: name, Sources: j.job.Derivation.Sources(), Store: s.Store.Kind(),
			Interval: s.Interval, FullInterval: s.FullInterval, File: s.File}
		j.mu.Lock()
		info.Running = j.running
		if rep := j.latest; rep != nil {
			info.LastState, info.LastRunAt, info.Confirmed, info.Pending = rep.State, rep.StartedAt, rep.Confirmed, rep.Pending
			info.Skipped, info.Waiting = rep.DerivationErrors, rep.Waiting
		}
		j.mu.Unlock()
		out = append(out, info)
	}
	return out
}

// Latest returns the report of the named derivation's latest run, nil if
// it has not run yet.
func (d *Daemon) Latest(name string) (*Report, error) {
	j, ok := d.jobs[name]
	if !ok {
		return nil, ErrUnknownDerivation
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.latest, nil
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/witness/submit"
)

// liveParts are the components a configuration reload replaces while
// serve runs: the derivation daemon, the self-audit checks, the witness
// submitter and retention (the webhooks live in the alert manager,
// alert.Manager.SetSinks). The API reaches them through liveDerivations,
// liveChecks and the witness closures, which follow the current ones.
//
// mu is held while a reload swaps them and while shutdown stops them, so
// that a reload racing a shutdown either runs before the stop (which then
// stops what it started) or finds closed and starts nothing.
type liveParts struct {
	mu     sync.Mutex
	closed bool // shutdown has stopped a part: a reload starts nothing

	derivs     liveDerivations
	derivStop  func() // nil without a daemon
	specDigest string // of the spec files' bytes (specDigest)

	checks       liveChecks
	checksStop   func()
	checksMetric []prometheus.Collector

	witnesses   atomic.Pointer[submit.Submitter] // nil without witnesses
	witnessStop func()
	witnessCols []prometheus.Collector

	retentionStop func()
	retentionCols []prometheus.Collector
}

// stopPart is a shutdown step: it stops the part fn stops, logging what
// (if anything runs), and closes the parts to reloads.
func (p *liveParts) stopPart(d *instance, what string, stop *func()) func() {
	return func() {
		p.mu.Lock()
		p.closed = true
		fn := *stop
		*stop = nil
		p.mu.Unlock()
		if fn != nil {
			d.log.Info("shutting down: " + what)
			fn()
		}
	}
}

// liveDerivations is the API's view of the derivation daemon running now
// (api.Derivations); a reload replaces the daemon.
type liveDerivations struct {
	metrics *rederive.Metrics // one for serve's life: every daemon reuses it
	cur     atomic.Pointer[rederive.Daemon]
	jobs    atomic.Pointer[[]rederive.Job]
}

// Configured reports whether any derivation is configured now; the API
// answers 404 no_derivations when none is.
func (l *liveDerivations) Configured() bool { return l.cur.Load() != nil }

func (l *liveDerivations) Jobs() []rederive.JobInfo {
	if d := l.cur.Load(); d != nil {
		return d.Jobs()
	}
	return []rederive.JobInfo{}
}

func (l *liveDerivations) Latest(name string) (*rederive.Report, error) {
	if d := l.cur.Load(); d != nil {
		return d.Latest(name)
	}
	return nil, rederive.ErrUnknownDerivation
}

func (l *liveDerivations) Trigger(name string, full bool) error {
	if d := l.cur.Load(); d != nil {
		return d.Trigger(name, full)
	}
	return rederive.ErrUnknownDerivation
}

// Snapshot serves GET /v1/derivations/{name}/snapshot from the daemon
// running now.
func (l *liveDerivations) Snapshot(name string) (*rederive.Snapshot, error) {
	if d := l.cur.Load(); d != nil {
		return d.Snapshot(name)
	}
	return nil, rederive.ErrUnknownDerivation
}

var _ api.Derivations = (*liveDerivations)(nil)

// current returns the compiled derivations running now.
func (l *liveDerivations) current() []rederive.Job {
	if j := l.jobs.Load(); j != nil {
		return *j
	}
	return nil
}

// runningJobs returns the derivations running now: those a reload
// applied, else those serve started with.
func (d *instance) runningJobs() []rederive.Job {
	if d.live != nil {
		if j := d.live.derivs.jobs.Load(); j != nil {
			return *j
		}
	}
	return d.jobs
}

// liveChecks is the API's view of the self-audit runner running now
// (api.Checks); a reload replaces the runner.
type liveChecks struct {
	cur atomic.Pointer[checkers.Runner]
}

func (l *liveChecks) Status() []checkers.Status {
	if r := l.cur.Load(); r != nil {
		return r.Status()
	}
	return nil
}

func (l *liveChecks) Trigger(name string) error {
	if r := l.cur.Load(); r != nil {
		return r.Trigger(name)
	}
	return fmt.Errorf("%w: %s", checkers.ErrUnknownChecker, name)
}

// stagedRegisterer collects the collectors a part registers while it is
// built, so that nothing reaches /metrics until the reload commits:
// swapCollectors then unregisters the part's old collectors and registers
// these. A part that fails to build leaves the registry as it was.
type stagedRegisterer struct{ cs []prometheus.Collector }

func (s *stagedRegisterer) Register(c prometheus.Collector) error {
	s.cs = append(s.cs, c)
	return nil
}

func (s *stagedRegisterer) MustRegister(cs ...prometheus.Collector) { s.cs = append(s.cs, cs...) }

func (s *stagedRegisterer) Unregister(c prometheus.Collector) bool {
	i := slices.Index(s.cs, c)
	if i < 0 {
		return false
	}
	s.cs = slices.Delete(s.cs, i, i+1)
	return true
}

// swapCollectors unregisters old from reg and registers next. A collector
// of next whose metrics are still registered (by a part swapCollectors
// does not know of) replaces them.
func swapCollectors(reg prometheus.Registerer, old, next []prometheus.Collector) error {
	for _, c := range old {
		reg.Unregister(c)
	}
	var errs []error
	for _, c := range next {
		err := reg.Register(c)
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			reg.Unregister(are.ExistingCollector)
			err = reg.Register(c)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// specDigest hashes the derivation spec files' bytes (and their order), so
// that a reload tells a spec edited in place from an unchanged one.
func specDigest(files []string) string {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		fmt.Fprintf(h, "%q %d %v\n", f, len(b), err)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// startLiveDerivations starts a daemon for jobs (none: no daemon) and makes
// it the current one, stopping the one before; p.mu must be held. The
// metrics of derivations no longer configured are removed.
func (d *instance) startLiveDerivations(p *liveParts, jobs []rederive.Job, cfg Config) error {
	ctx, cancel := context.WithCancel(context.Background())
	daemon, done, err := startDerivations(ctx, d.store, jobs, cfg, d.alerts, p.derivs.metrics, d.log, d.afterDerivationRun)
	if err != nil {
		cancel()
		return err
	}
	old, oldJobs := p.derivStop, p.derivs.current()
	if old != nil {
		old() // the old daemon finishes or abandons its runs before the new one starts its own
	}
	p.derivs.jobs.Store(&jobs)
	p.derivs.cur.Store(daemon)
	p.derivStop = nil
	if daemon != nil {
		p.derivStop = func() { cancel(); <-done }
	} else {
		cancel()
	}
	for _, j := range oldJobs {
		name := j.Derivation.Name()
		if !slices.ContainsFunc(jobs, func(n rederive.Job) bool { return n.Derivation.Name() == name }) {
			p.derivs.metrics.Forget(name)
			d.resolveDerivationAlerts(name)
		}
	}
	return nil
}

// resolveDerivationAlerts resolves the drift, store and derivation error
// alerts of a derivation a reload removed: nothing checks it any more, so
// nothing else would. Integrity alerts (an incremental fold that disagreed
// with the full one) stay for a person to look at.
func (d *instance) resolveDerivationAlerts(name string) {
	for _, k := range []alert.Kind{alert.KindDrift, alert.KindStoreError, alert.KindDerivationError} {
		if err := d.alerts.Sync(k, name, nil); err != nil {
			d.log.Warn("resolving the alerts of a removed derivation", "derivation", name, "kind", k, "err", err)
		}
	}
}

// afterDerivationRun runs the invariant check after a derivation's run.
func (d *instance) afterDerivationRun(string) {
	if r := d.live.checks.cur.Load(); r != nil {
		triggerInvariants(r)
	}
}

// buildChecks starts a self-audit runner for cfg's checks over jobs, its
// collectors staged (not registered); it runs from now on.
func (d *instance) buildChecks(cfg Config, jobs []rederive.Job) (r *checkers.Runner, stop func(), cols []prometheus.Collector, err error) {
	cc := cfg.Checks
	cc.jobs = jobs
	var reg stagedRegisterer
	r, stop, err = startChecks(d.store, d.key.verifier, cc, d.alerts, &reg, d.log)
	if err != nil {
		return nil, nil, nil, err
	}
	return r, stop, reg.cs, nil
}

// setChecks makes r the current runner, stopping the one before; p.mu
// must be held.
func (d *instance) setChecks(p *liveParts, r *checkers.Runner, stop func(), cols []prometheus.Collector) {
	old := p.checksStop
	p.checks.cur.Store(r)
	p.checksStop = stop
	if old != nil {
		old()
	}
	if err := swapCollectors(d.metrics, p.checksMetric, cols); err != nil {
		d.log.Warn("self-audit metrics not all registered", "err", err)
	}
	p.checksMetric = cols
}

// buildRetention builds the retention passes cfg asks for (nil without a
// policy), not running, their collectors staged.
func (d *instance) buildRetention(cfg Config) (*ledger.Retention, []prometheus.Collector, error) {
	r, err := d.newRetention(cfg.Retention) // retention.go
	if err != nil || r == nil {
		return nil, nil, err
	}
	return r, r.Collectors(), nil
}

// setRetention runs r (nil: none) in place of the passes before; p.mu
// must be held.
func (d *instance) setRetention(p *liveParts, r *ledger.Retention, cols []prometheus.Collector, cfg Config) {
	if old := p.retentionStop; old != nil {
		old()
	}
	p.retentionStop = nil
	if err := swapCollectors(d.metrics, p.retentionCols, cols); err != nil {
		d.log.Warn("retention metrics not all registered", "err", err)
	}
	p.retentionCols = cols
	if r == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	p.retentionStop = func() { cancel(); <-done }
	d.log.Info("retention", "policies", len(cfg.Retention.Logs), "interval", cfg.Retention.Interval)
}

// setWitnesses runs sub (nil: none) in place of the submitter before; p.mu
// must be held. Cosignatures are gathered again by the new submitter.
func (d *instance) setWitnesses(p *liveParts, sub *submit.Submitter, cols []prometheus.Collector) {
	if old := p.witnessStop; old != nil {
		old()
	}
	p.witnessStop = nil
	if err := swapCollectors(d.metrics, p.witnessCols, cols); err != nil {
		d.log.Warn("witness metrics not all registered", "err", err)
	}
	p.witnessCols = cols
	p.witnesses.Store(sub)
	if sub == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sub.Run(ctx) }()
	p.witnessStop = func() { cancel(); <-done }
}

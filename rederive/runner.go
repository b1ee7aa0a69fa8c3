package rederive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
	"golang.org/x/mod/sumdb/note"
)

// Job is a derivation to check: a compiled derivation and its spec (the
// store, comparison and timeliness settings; for a derivation registered
// from Go, a spec without expressions).
type Job struct {
	Spec       *spec.Spec
	Derivation fold.Derivation
}

// Runner runs derivation checks against a ledger.
type Runner struct {
	ledger         Ledger
	bucket         *ledger.Bucket
	noMatchIsError bool
	workers        int
	logger         *slog.Logger
	metrics        *Metrics
	now            func() time.Time
	progress       func(derivation string, done, total uint64)
	snapshot       *Snapshot     // WithSnapshot
	snapVerifier   note.Verifier // WithSnapshotVerifier, WithSnapshot

	mu       sync.Mutex
	noSource map[string]bool // derivations warned of matching no log, until one matches
}

// A RunnerOption configures a Runner.
type RunnerOption func(*Runner)

// WithBucket keeps state between runs in b (incremental results, drift
// confirmation, latest reports). Without it the runner runs statelessly
// (auditd verify).
func WithBucket(b *ledger.Bucket) RunnerOption { return func(r *Runner) { r.bucket = b } }

// WithNoMatchIsError makes sources that match no log at all an error
// (auditd verify: a one-off check of a named log). Otherwise such a run
// is in state no_source (and logs a warning the first time), as one whose
// logs have no signed checkpoint yet is pending.
func WithNoMatchIsError() RunnerOption { return func(r *Runner) { r.noMatchIsError = true } }

// WithWorkers sets the fold's workers (default: fold's default,
// GOMAXPROCS).
func WithWorkers(n int) RunnerOption { return func(r *Runner) { r.workers = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) RunnerOption { return func(r *Runner) { r.logger = l } }

// WithMetrics records each run in m.
func WithMetrics(m *Metrics) RunnerOption { return func(r *Runner) { r.metrics = m } }

// WithClock sets the clock of the grace period (default time.Now). Folds
// never see it.
func WithClock(now func() time.Time) RunnerOption { return func(r *Runner) { r.now = now } }

// WithProgress has fn receive fold progress.
func WithProgress(fn func(derivation string, done, total uint64)) RunnerOption {
	return func(r *Runner) { r.progress = fn }
}

// NewRunner returns a runner that checks derivations against lg.
func NewRunner(lg Ledger, opts ...RunnerOption) *Runner {
	r := &Runner{ledger: lg}
	for _, o := range opts {
		o(r)
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r
}

// Run checks one derivation. full folds from zero; otherwise the run
// continues from the saved result when there is one. The returned report
// is in state error when the run could not judge the store; err is
// reserved for a cancelled context.
func (r *Runner) Run(ctx context.Context, job Job, full bool) (*Report, error) {
	start := time.Now()
	d := job.Derivation
	var prev *Report // the run before this one, for where drifted keys last agreed
	if r.bucket != nil {
		prev, _ = LatestReport(r.bucket, d.Name())
	}
	rep := &Report{Derivation: d.Name(), Mode: "full", Severity: job.Spec.Severity, StartedAt: r.now().UTC(), Drift: []DriftReport{}}
	judged, f := r.check(ctx, rep, prev, job, full)
	if f != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The store's errors name it without secrets; this guards against
		// a library's error that quotes its URL or DSN.
		f.err = redact.Error(f.err, job.Spec.Store.Secrets()...)
		rep.State, rep.ErrorKind, rep.Error = StateError, f.kind, f.err.Error()
	}
	rep.Seconds = time.Since(start).Seconds()
	r.finish(rep)
	r.logRun(rep, d, judged, f)
	return rep, nil
}

// check runs the steps of a check of job, recording them on rep: pin the
// source logs (judged false when there is nothing to judge yet: rep is in
// state no_source or pending), open and check the store, fold up to its
// watermarks, compare, sort the drift into pending and confirmed, collect
// its lineage, and give rep its state. A failure leaves rep's state to Run.
func (r *Runner) check(ctx context.Context, rep, prev *Report, job Job, full bool) (judged bool, _ *runFailure) {
	sp, d := job.Spec, job.Derivation
	cps, judged, f := r.sourcePins(ctx, rep, job)
	if f != nil || !judged {
		return judged, f
	}
	st, err := store.Open(ctx, sp.Store)
	if err != nil {
		return true, &runFailure{ErrKindStore, err}
	}
	defer st.Close()
	// The store first: one that is down, or a query or file that does not
	// fit, is reported in milliseconds, not after the whole fold.
	if err := st.Check(ctx); err != nil {
		return true, &runFailure{ErrKindStore, err}
	}
	spans, hasMarks, f := r.spans(ctx, rep, st, cps)
	if f != nil {
		return true, f
	}
	fullSpans := append([]fold.Span(nil), spans...)
	opts := r.foldOptions(sp, d)
	res, f := r.fold(ctx, rep, d, spans, opts, full, r.logger)
	if f != nil {
		return true, f
	}
	if f := everyEventFailed(res); f != nil {
		return true, f
	}
	drifts, f := r.compare(ctx, rep, st, sp, d, res, full)
	if f != nil {
		return true, f
	}
	r.judge(ctx, rep, sp, res, drifts, hasMarks)
	if f := r.lineage(ctx, rep, prev, sp, d, fullSpans, cps, opts); f != nil {
		return true, f
	}
	switch {
	case rep.Confirmed > 0:
		rep.State = StateDrift
	case rep.Pending > 0:
		rep.State = StatePending
	default:
		rep.State = StateClean
	}
	return true, nil
}

// sourcePins pins job's source logs at their latest signed checkpoints
// (pins). With no log matching its sources, or none with a signed
// checkpoint of entries yet, there is nothing to judge: rep is put in
// state no_source or pending and judged is false.
func (r *Runner) sourcePins(ctx context.Context, rep *Report, job Job) (cps []fold.Pin, judged bool, _ *runFailure) {
	sp, d := job.Spec, job.Derivation
	cps, matched, f := r.pins(ctx, d)
	if f != nil {
		return nil, true, f
	}
	if r.warnNoSource(d.Name(), matched == 0) {
		r.logger.Warn("derivation matches no log: it judges nothing until a log its sources match exists (a typo in sources?)",
			"derivation", rep.Derivation, "sources", d.Sources(), "file", sp.File)
	}
	if matched == 0 {
		rep.State = StateNoSource
		rep.Waiting = fmt.Sprintf("no log matches sources %v", d.Sources())
		rep.Pins = []fold.Pin{}
		return nil, false, nil
	}
	if len(cps) == 0 {
		// Nothing to judge yet (a fresh daemon before its first events):
		// pending, as verify treats empty logs, not a derivation error.
		rep.State = StatePending
		rep.Waiting = fmt.Sprintf("no source log matching %v has a signed checkpoint of entries yet", d.Sources())
		rep.Pins = []fold.Pin{}
		return nil, false, nil
	}
	return cps, true, nil
}

// foldOptions are the options of the run's fold of d.
func (r *Runner) foldOptions(sp *spec.Spec, d fold.Derivation) fold.Options {
	opts := fold.Options{Workers: r.workers, ErrorBudget: sp.ErrorBudget, Fingerprint: spec.Fingerprint(sp)}
	if sp.Lineage > 0 {
		// The fold records which keys each batch steps, so that lineage
		// reads only the batches of the drifted keys (attachLineage).
		opts.KeyIndex = fold.NewKeyIndex()
	}
	if r.progress != nil {
		name := d.Name()
		opts.Progress = func(done, total uint64) { r.progress(name, done, total) }
	}
	return opts
}

// everyEventFailed fails a run in which not one event derived a key: the
// derivation is broken (a typo in a field name, a step that cannot run),
// and every row of the store would be reported as drift that is not the
// store's.
func everyEventFailed(res *fold.Result) *runFailure {
	if res.ErrorCount == 0 || len(res.States) > 0 {
		return nil
	}
	first := ""
	if len(res.Errors) > 0 {
		e := res.Errors[0]
		first = fmt.Sprintf("; the first, %s#%d: %s", e.Log, e.Index, e.Err)
	}
	return &runFailure{ErrKindDerivation, fmt.Errorf("%w: every event failed (%d derivation errors, no key derived): the derivation is broken, not the store%s", ErrAllEventsFailed, res.ErrorCount, first)}
}

// judge sorts drifts into pending and confirmed (classify), counting the
// grace period when the store reports no watermarks.
func (r *Runner) judge(ctx context.Context, rep *Report, sp *spec.Spec, res *fold.Result, drifts []compare.Drift, hasMarks bool) {
	young := func(*fold.EventRef) bool { return false }
	if grace := time.Duration(sp.Grace); grace > 0 && !hasMarks && len(drifts) > 0 {
		young = r.graceWindow(ctx, rep.Pins, r.now().Add(-grace))
	}
	r.classify(rep, sp, res, drifts, young)
	if len(rep.Ahead) > 0 && len(rep.Drift) > 0 {
		rep.Waiting = "drift judged once a signed checkpoint covers the store's watermark: " + strings.Join(rep.Ahead, "; ")
	}
}

// lineage attaches the drift's lineage (attachLineage). Evidence that does
// not verify fails the run; another error leaves the drift without
// lineage, with a warning.
func (r *Runner) lineage(ctx context.Context, rep, prev *Report, sp *spec.Spec, d fold.Derivation, spans []fold.Span, cps []fold.Pin, opts fold.Options) *runFailure {
	err := r.attachLineage(ctx, rep, prev, sp, d, spans, cps, opts)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil || errors.Is(err, ErrVerification):
		// A cancelled context ends the run without a report (Run).
		return &runFailure{ErrKindVerification, err}
	}
	r.logger.Warn("lineage not collected", "derivation", d.Name(), "err", err)
	return nil
}

// logRun logs how a run ended: failed, waiting for entries, or checked
// (a run whose sources match no log was warned of when found).
func (r *Runner) logRun(rep *Report, d fold.Derivation, judged bool, f *runFailure) {
	switch {
	case f != nil:
		r.logger.Error("derivation run failed", "derivation", rep.Derivation, "kind", f.kind, "err", f.err)
	case !judged && rep.State == StatePending:
		r.logger.Info("derivation waiting for entries", "derivation", rep.Derivation, "sources", d.Sources())
	case judged:
		r.logger.Info("derivation checked", "derivation", rep.Derivation, "mode", rep.Mode, "state", rep.State,
			"events", rep.Events, "keys", rep.Keys, "confirmed", rep.Confirmed, "pending", rep.Pending, "seconds", rep.Seconds)
	}
}

// runFailure ends a run in state error: its error kind and error.
type runFailure struct {
	kind string
	err  error
}

// ledgerFailure is a failure to read the ledger.
func ledgerFailure(err error) *runFailure { return &runFailure{ledgerKind(err), err} }

// pins pins each source log of d at its latest signed checkpoint. An empty
// log (no checkpoint, or one of size 0) has nothing to judge yet and is
// left out.
func (r *Runner) pins(ctx context.Context, d fold.Derivation) ([]fold.Pin, int, *runFailure) {
	all, err := r.ledger.Logs(ctx)
	if err != nil {
		return nil, 0, ledgerFailure(err)
	}
	logs := matchLogs(all, d.Sources())
	var cps []fold.Pin
	for _, l := range logs {
		p, ok, err := r.ledger.Pin(ctx, l)
		if err != nil {
			return nil, 0, ledgerFailure(fmt.Errorf("checkpoint of %s: %w", l, err))
		}
		if ok && p.Size > 0 {
			cps = append(cps, p)
		}
	}
	if len(logs) == 0 && r.noMatchIsError {
		return nil, 0, &runFailure{ErrKindLedger, fmt.Errorf("no log matches the sources %v", d.Sources())}
	}
	return cps, len(logs), nil
}

// warnNoSource records whether the named derivation's sources match no
// log and reports whether that is news, worth one warning: the first run
// that matches nothing, and again after a run that matched.
func (r *Runner) warnNoSource(name string, none bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !none {
		delete(r.noSource, name)
		return false
	}
	if r.noSource[name] {
		return false
	}
	if r.noSource == nil {
		r.noSource = map[string]bool{}
	}
	r.noSource[name] = true
	return true
}

// spans returns the spans to fold: up to the store's watermark when it
// reports one (recorded on rep), else up to the checkpoint. A checkpoint
// the store is ahead of is replaced in cps by a newer one.
func (r *Runner) spans(ctx context.Context, rep *Report, st store.Store, cps []fold.Pin) ([]fold.Span, bool, *runFailure) {
	marks, hasMarks, err := st.Watermarks(ctx)
	if err != nil {
		return nil, false, &runFailure{ErrKindStore, fmt.Errorf("watermarks: %w", err)}
	}
	var spans []fold.Span
	for i, cp := range cps {
		pin := cp
		if hasMarks {
			wm, ok := marks[cp.Log]
			if !ok {
				// Folding the log to 0 entries would report every key it
				// derives as drift: the store's watermark table is wrong or
				// incomplete, which the store's operator must fix.
				return nil, false, &runFailure{ErrKindStore, fmt.Errorf("%w: the store reports watermarks for %s but none for the source log %s: add a row for it to the watermark table (0 if the store has applied none of it)", ErrWatermarkMissing, logNames(marks), cp.Log)}
			}
			if wm > cp.Size {
				// The store applied entries not signed yet: judged at the
				// older checkpoint, its newer values would be drift.
				if cp, err = r.awaitPin(ctx, cp, wm); err != nil {
					return nil, false, ledgerFailure(fmt.Errorf("checkpoint of %s: %w", cp.Log, err))
				}
				cps[i], pin = cp, cp
				if wm > cp.Size {
					// Still ahead: the keys those entries touch cannot be
					// judged yet, and which they are is unknown until they
					// are signed, so every drift of this run is pending.
					rep.Ahead = append(rep.Ahead, fmt.Sprintf("%s: the store's watermark %d is ahead of the latest signed checkpoint (size %d)", cp.Log, wm, cp.Size))
				}
			}
			if wm < cp.Size {
				if pin, err = pinBelow(ctx, r.ledger, cp.Log, wm, cp); err != nil {
					return nil, false, ledgerFailure(err)
				}
			}
		}
		reader := r.ledger.Reader(cp.Log, cp)
		spans = append(spans, fold.Span{Reader: reader, From: 0, To: pin.Size, Pin: pin})
	}
	if hasMarks {
		rep.Watermarks = marks
	}
	return spans, hasMarks, nil
}

// fold folds d over spans: incrementally from the saved result when there
// is one that continues to them and full is false, else from zero (then
// checking the incremental path against the full fold). It saves the
// result and records its figures on rep.
func (r *Runner) fold(ctx context.Context, rep *Report, d fold.Derivation, spans []fold.Span, opts fold.Options, full bool, logger *slog.Logger) (*fold.Result, *runFailure) {
	var base *fold.Result
	if r.bucket != nil {
		if b, err := fold.LoadResult(r.bucket, d); err == nil {
			base = b
		} else if !errors.Is(err, ledger.ErrNotFound) {
			logger.Warn("saved derivation state unreadable; folding from zero", "derivation", d.Name(), "err", err)
		}
	}
	if base != nil && !r.continues(ctx, base, spans, opts.Fingerprint) {
		base = nil
	}
	pruned, err := r.watermarks(spans)
	if err != nil {
		return nil, ledgerFailure(fmt.Errorf("prune watermarks: %w", err))
	}
	if base != nil && !covers(base, spans, pruned) {
		base = nil // it would fold over pruned payloads: from the snapshot
	}
	var res *fold.Result
	if base != nil && !full && r.snapshot == nil {
		rep.Mode = "incremental"
		res, err = fold.Fold(ctx, d, base, fromBase(base, spans), opts)
	} else {
		// From zero, or from the snapshot when payloads are pruned.
		start, f := r.snapshotBase(ctx, d, spans, opts.Fingerprint, pruned)
		if f != nil {
			return nil, f
		}
		rep.FromSnapshot = start != nil
		res, err = fold.Fold(ctx, d, start, fromBase(start, spans), opts)
		if err == nil && base != nil {
			// Check the incremental path: continue the saved result to
			// the same pins and compare it with the full fold.
			rep.IncrementalMismatch = r.checkIncremental(ctx, d, base, spans, opts, res)
		}
	}
	if err != nil {
		if errors.Is(err, fold.ErrBudget) {
			if res != nil {
				rep.DerivationErrors, rep.Errors = res.ErrorCount, res.Errors
			}
			return nil, &runFailure{ErrKindDerivation, err}
		}
		if errors.Is(err, fold.ErrPayloadPruned) {
			err = fmt.Errorf("%w: %w (the ledger does not say its pruning watermark; a snapshot covering it is needed)", ErrPrunedRange, err)
		}
		return nil, ledgerFailure(err)
	}
	rep.Pins, rep.Events, rep.Keys = res.Pins, res.Events, len(res.States)
	rep.DerivationErrors, rep.Errors = res.ErrorCount, res.Errors
	if r.bucket != nil {
		if err := fold.SaveResult(r.bucket, d, res); err != nil {
			logger.Error("derivation state not saved; the next run folds more", "derivation", d.Name(), "err", err)
		}
	}
	return res, nil
}

// compare exports res's states and compares them with the store,
// recording the figures on rep.
func (r *Runner) compare(ctx context.Context, rep *Report, st store.Store, sp *spec.Spec, d fold.Derivation, res *fold.Result, full bool) ([]compare.Drift, *runFailure) {
	expected := make(map[string]any, len(res.States))
	for k, s := range res.States {
		v, err := fold.Export(d, k, s)
		if err != nil {
			return nil, &runFailure{ErrKindDerivation, fmt.Errorf("export the state of key %q: %w", k, err)}
		}
		expected[k] = v
	}
	var drifts []compare.Drift
	collect := func(dr compare.Drift) error {
		drifts = append(drifts, dr)
		return nil
	}
	incremental := sp.Compare.Incremental && r.bucket != nil
	var stats compare.Stats
	var err error
	done := false
	if incremental && !full {
		stats, done, err = r.compareChanged(ctx, st, sp, expected, collect)
	}
	if !done {
		stats, err = compare.Compare(ctx, st, expected, sp.Compare, collect)
	}
	if err == nil && incremental && len(drifts) == 0 {
		r.saveBaseline(sp, expected, r.logger)
	}
	if errors.Is(err, compare.ErrConfig) {
		// A column of the wrong type (cents as text): every row would
		// differ, and none of it is the store's data being wrong.
		return nil, &runFailure{ErrKindConfig, err}
	}
	if err != nil {
		return nil, &runFailure{ErrKindStore, err}
	}
	rep.Stats = stats
	return drifts, nil
}

// aheadWait bounds how long a run waits for a checkpoint that covers a
// store's watermark; one is signed within a checkpoint interval of an
// append.
const aheadWait = 5 * time.Second

// awaitPin waits up to aheadWait for a signed checkpoint of p's log of at
// least size and returns it, or the latest one seen if none comes.
func (r *Runner) awaitPin(ctx context.Context, p fold.Pin, size uint64) (fold.Pin, error) {
	deadline := time.Now().Add(aheadWait)
	for wait := 10 * time.Millisecond; p.Size < size && time.Now().Before(deadline); wait = min(2*wait, 200*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, ctx.Err()
		case <-t.C:
		}
		np, ok, err := r.ledger.Pin(ctx, p.Log)
		if err != nil {
			return p, err
		}
		if ok && np.Size >= p.Size {
			p = np
		}
	}
	return p, nil
}

// continues reports whether base can be continued to spans: same
// derivation logic, and every pin of base is a prefix of the new span.
func (r *Runner) continues(ctx context.Context, base *fold.Result, spans []fold.Span, fp string) bool {
	if base.Fingerprint != fp {
		return false
	}
	for _, bp := range base.Pins {
		found := false
		for _, s := range spans {
			if s.Pin.Log != bp.Log {
				continue
			}
			found = true
			if bp.Size > s.Pin.Size {
				return false // the store's watermark went back: refold
			}
			if lg, ok := r.ledger.(LocalLedger); ok && bp.Size > 0 {
				l, err := lg.Store.Log(bp.Log)
				if err != nil {
					return false
				}
				root, err := l.RootAt(bp.Size)
				if err != nil || root != bp.Root {
					return false
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// checkIncremental folds base forward to spans and returns the keys whose
// state differs from the full fold's (nil when they agree).
func (r *Runner) checkIncremental(ctx context.Context, d fold.Derivation, base *fold.Result, spans []fold.Span, opts fold.Options, full *fold.Result) []string {
	opts.Progress = nil
	res, err := fold.Fold(ctx, d, base, fromBase(base, spans), opts)
	if err != nil {
		return nil
	}
	var diff []string
	seen := map[string]bool{}
	for k, st := range full.States {
		seen[k] = true
		o, ok := res.States[k]
		if !ok || !sameState(d, st, o) {
			diff = append(diff, k)
		}
	}
	for k := range res.States {
		if !seen[k] {
			diff = append(diff, k)
		}
	}
	sort.Strings(diff)
	if len(diff) > MaxReportedDrift {
		diff = diff[:MaxReportedDrift]
	}
	return diff
}

func sameState(d fold.Derivation, a, b fold.State) bool {
	x, err1 := d.Encode(a)
	y, err2 := d.Encode(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// confirmation is what a runner remembers of a drifting key across runs.
type confirmation struct {
	Runs int `json:"runs"`
}

// classify sorts drifts into pending and confirmed. A drift on a key whose
// newest event young says is within the grace period is pending whatever
// the run count; otherwise a drift is confirmed once it has persisted
// across ConfirmRuns runs.
func (r *Runner) classify(rep *Report, sp *spec.Spec, res *fold.Result, drifts []compare.Drift, young func(*fold.EventRef) bool) {
	prev := map[string]confirmation{}
	key := []byte("confirm/" + rep.Derivation)
	if r.bucket != nil {
		if b, err := r.bucket.Get(key); err == nil {
			_ = json.Unmarshal(b, &prev)
		}
	}
	confirmRuns := max(sp.ConfirmRuns, 1)
	if r.bucket == nil {
		confirmRuns = 1 // a single run (auditd verify) confirms at once
	}
	next := make(map[string]confirmation, len(drifts))
	var confirmed, pending []DriftReport
	for _, dr := range drifts {
		c := confirmation{Runs: prev[dr.Key].Runs + 1}
		if len(next) < maxTrackedDrift {
			next[dr.Key] = c
		}
		out := DriftReport{Drift: dr, Runs: c.Runs, Status: "pending"}
		if ref, ok := res.Newest[dr.Key]; ok {
			ref := ref
			out.Newest = &ref
		}
		inGrace := out.Newest != nil && young(out.Newest)
		if !inGrace && c.Runs >= confirmRuns && len(rep.Ahead) == 0 {
			out.Status = "confirmed"
			confirmed = append(confirmed, out)
		} else {
			pending = append(pending, out)
		}
	}
	rep.Confirmed, rep.Pending = len(confirmed), len(pending)
	byKey := func(s []DriftReport) {
		sort.Slice(s, func(i, j int) bool { return s[i].Key < s[j].Key })
	}
	byKey(confirmed)
	byKey(pending)
	// Never nil: a clean report lists "drift": [], not null.
	rep.Drift = append(append(make([]DriftReport, 0, len(confirmed)+len(pending)), confirmed...), pending...)
	if len(rep.Drift) > MaxReportedDrift {
		rep.Drift = rep.Drift[:MaxReportedDrift]
	}
	if r.bucket != nil {
		b, _ := json.Marshal(next)
		if err := r.bucket.Set(key, b); err != nil && r.logger != nil {
			r.logger.Warn("drift confirmation state not saved", "derivation", rep.Derivation, "err", err)
		}
	}
}

// attachLineage collects, for the reported drifted keys (at most
// MaxLineageKeys, none of kind extra: nothing derives them), the last
// entries that produced their expected values and the entries that can
// explain the difference (see suspects), each with its inclusion proof in
// the signed checkpoint (of cps) its span was read under (keyLineage, with
// the run's fold options: its KeyIndex).
func (r *Runner) attachLineage(ctx context.Context, rep, prev *Report, sp *spec.Spec, d fold.Derivation, spans []fold.Span, cps []fold.Pin, opts fold.Options) error {
	n := sp.Lineage
	if n <= 0 || len(rep.Drift) == 0 {
		return nil
	}
	keys := map[string]bool{}
	for _, dr := range rep.Drift {
		if dr.Kind == compare.DriftExtra {
			continue // nothing derives it: no lineage
		}
		if len(keys) == MaxLineageKeys {
			break
		}
		keys[dr.Key] = true
	}
	if len(keys) == 0 {
		return nil
	}
	signed := make(map[string]fold.Pin, len(cps))
	for _, cp := range cps {
		signed[cp.Log] = cp
	}
	lin, err := keyLineage(ctx, r.ledger, d, spans, signed, keys, n, suspects(rep, prev), opts)
	if err != nil {
		return err
	}
	for i := range rep.Drift {
		rep.Drift[i].Lineage = lin[rep.Drift[i].Key]
	}
	return nil
}

// suspects is what lineage looks for in the drifted keys' histories: for
// a mismatch of two numbers, the entries whose contribution is the
// difference (or its opposite: applied twice, or missed); for a key that
// agreed with the store in the previous run (it drifts for the first time,
// and that run judged the store), its first entry since that run's pins.
func suspects(rep, prev *Report) fold.Suspects {
	s := fold.Suspects{Diff: map[string]*big.Rat{}, Since: map[string]map[string]uint64{}}
	var since map[string]uint64
	if prev != nil && prev.State != StateError && len(prev.Pins) > 0 {
		since = map[string]uint64{}
		for _, p := range prev.Pins {
			since[p.Log] = p.Size
		}
	}
	for _, dr := range rep.Drift {
		if since != nil && dr.Runs == 1 {
			s.Since[dr.Key] = since
		}
		if dr.Kind != compare.DriftMismatch {
			continue
		}
		if _, text := dr.Expected.(string); text {
			continue // a string state is not a number, whatever it reads
		}
		if _, text := dr.Actual.(string); text {
			continue
		}
		exp, ok1 := fold.Number(dr.Expected)
		act, ok2 := fold.Number(dr.Actual)
		if ok1 && ok2 {
			s.Diff[dr.Key] = act.Sub(act, exp)
		}
	}
	return s
}

// graceWindow returns whether an event is within the grace period: ledgered
// at or after cutoff. The grace period counts from when auditd ledgered the
// event, not from the event's own time: a backfill of old events is young
// when it arrives, and an event dated in the future is not young for
// years. Times only grow with the index (one per group commit), so for
// each pinned log the first index ledgered at or after cutoff, and the
// first with a recorded time at all, are found by binary search: a few
// dozen lookups per log whatever the number of drifts. Where the ledger
// cannot tell (no recorded time: entries from before auditd recorded it,
// or a ledger that does not record them), the event's own time stands in.
func (r *Runner) graceWindow(ctx context.Context, pins []fold.Pin, cutoff time.Time) func(*fold.EventRef) bool {
	byTime := func(ref *fold.EventRef) bool { return !ref.Time.Before(cutoff) }
	lt, ok := r.ledger.(LedgeredTimes)
	if !ok {
		return byTime
	}
	type bounds struct{ recorded, young uint64 }
	logs := map[string]bounds{}
	for _, p := range pins {
		var failed error
		search := func(pred func(t time.Time, ok bool) bool) uint64 {
			return uint64(sort.Search(int(p.Size), func(i int) bool {
				if failed != nil {
					return true
				}
				t, ok, err := lt.LedgeredAt(ctx, p.Log, uint64(i))
				if err != nil {
					failed = err
					return true
				}
				return pred(t, ok)
			}))
		}
		b := bounds{recorded: search(func(_ time.Time, ok bool) bool { return ok })}
		b.young = search(func(t time.Time, ok bool) bool { return ok && !t.Before(cutoff) })
		if failed != nil {
			r.logger.Warn("ledgered times not read; the grace period counts from event times", "log", p.Log, "err", failed)
			continue
		}
		logs[p.Log] = b
	}
	return func(ref *fold.EventRef) bool {
		b, ok := logs[ref.Log]
		if !ok || ref.Index < b.recorded {
			return byTime(ref)
		}
		return ref.Index >= b.young
	}
}

// logNames lists the logs of marks, sorted.
func logNames(marks map[string]uint64) []string {
	out := make([]string, 0, len(marks))
	for l := range marks {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// finish records the run's metrics and, in the daemon, its report.
func (r *Runner) finish(rep *Report) {
	if m := r.metrics; m != nil {
		m.observe(rep)
	}
	if r.bucket != nil {
		if b, err := json.Marshal(rep); err == nil {
			_ = r.bucket.Set([]byte("report/"+rep.Derivation), b)
		}
	}
}

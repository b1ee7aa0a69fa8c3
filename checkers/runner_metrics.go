package checkers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/ledger"
)

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

// kinds are the finding kinds whose series exist (at 0) from the start,
// for a checker that does not say which kinds it reports (FindingKinds).
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

func (m *metrics) register(name string, s Schedule, rec *record, ks []string) {
	for _, r := range []string{ResultOK, ResultFindings, ResultError, ResultCanceled} {
		m.runs.WithLabelValues(name, r)
	}
	m.entries.WithLabelValues(name)
	seen := map[string]bool{}
	for _, k := range ks {
		m.findingsTotal.WithLabelValues(name, k)
		seen[k] = true
	}
	m.mu.Lock()
	m.kinds[name] = seen
	m.mu.Unlock()
	m.interval.WithLabelValues(name).Set(s.Interval.Seconds())
	m.update(name, rec)
}

// update sets the gauges from rec.
func (m *metrics) update(name string, rec *record) {
	m.mu.Lock()
	seen := m.kinds[name]
	if seen == nil {
		seen = map[string]bool{}
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

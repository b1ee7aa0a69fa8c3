package rederive

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/rederive/compare"
)

func ledgerKind(err error) string {
	if errors.Is(err, ErrVerification) {
		return ErrKindVerification
	}
	return ErrKindLedger
}

// Metrics are the runner's Prometheus collectors, labelled by derivation
// name only.
type Metrics struct {
	runs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	events    *prometheus.CounterVec
	keys      *prometheus.CounterVec
	drift     *prometheus.GaugeVec
	pending   *prometheus.GaugeVec
	storeErrs *prometheus.CounterVec
	derivErrs *prometheus.CounterVec
	lastRun   *prometheus.GaugeVec
}

// NewMetrics returns the runner's collectors.
func NewMetrics() *Metrics {
	l := []string{"derivation"}
	return &Metrics{
		runs:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "derivation_runs_total", Help: "Derivation runs by outcome state (clean, pending, drift, error, no_source)."}, []string{"derivation", "state"}),
		duration:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "derivation_run_duration_seconds", Help: "Duration of derivation runs.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 10)}, l),
		events:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "derivation_events_folded_total", Help: "Ledger entries folded by derivation runs."}, l),
		keys:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "derivation_keys_compared_total", Help: "Keys compared with the derived store."}, l),
		drift:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "derivation_drift_keys", Help: "Confirmed drifted keys in the latest run, by kind (missing, extra, mismatch)."}, []string{"derivation", "kind"}),
		pending:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "derivation_pending_keys", Help: "Mismatched keys not confirmed yet (young or not repeated) in the latest run."}, l),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "derivation_store_errors_total", Help: "Runs that failed on the derived store (down, malformed rows)."}, l),
		derivErrs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "derivation_event_errors_total", Help: "Events whose filter, key or step failed."}, l),
		lastRun:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "derivation_last_run_timestamp_seconds", Help: "When the latest run of the derivation finished."}, l),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.duration, m.events, m.keys, m.drift, m.pending, m.storeErrs, m.derivErrs, m.lastRun}
}

func (m *Metrics) observe(rep *Report) {
	name := rep.Derivation
	m.runs.WithLabelValues(name, rep.State).Inc()
	m.duration.WithLabelValues(name).Observe(rep.Seconds)
	m.events.WithLabelValues(name).Add(float64(rep.Events))
	m.keys.WithLabelValues(name).Add(float64(rep.Stats.Keys))
	m.derivErrs.WithLabelValues(name).Add(float64(rep.DerivationErrors))
	m.lastRun.WithLabelValues(name).SetToCurrentTime()
	if rep.State == StateError {
		if rep.ErrorKind == ErrKindStore {
			m.storeErrs.WithLabelValues(name).Inc()
		}
		return
	}
	counts := map[compare.DriftKind]int{compare.DriftMissing: 0, compare.DriftExtra: 0, compare.DriftMismatch: 0}
	for _, dr := range rep.Drift {
		if dr.Status == "confirmed" {
			counts[dr.Kind]++
		}
	}
	for k, n := range counts {
		m.drift.WithLabelValues(name, string(k)).Set(float64(n))
	}
	m.pending.WithLabelValues(name).Set(float64(rep.Pending))
}

// Forget deletes the series of a derivation no longer configured (a
// configuration reload removed it), so that /metrics does not keep
// reporting its last drift. The collectors stay registered: a reload
// reuses one Metrics for every runner it starts.
func (m *Metrics) Forget(derivation string) {
	l := map[string]string{"derivation": derivation}
	m.runs.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.events.DeletePartialMatch(l)
	m.keys.DeletePartialMatch(l)
	m.drift.DeletePartialMatch(l)
	m.pending.DeletePartialMatch(l)
	m.storeErrs.DeletePartialMatch(l)
	m.derivErrs.DeletePartialMatch(l)
	m.lastRun.DeletePartialMatch(l)
}

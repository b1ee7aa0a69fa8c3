package ledger

import "github.com/prometheus/client_golang/prometheus"

// metrics are the ledger's collectors. Names carry no prefix; the daemon
// registers them under auditd_.
type metrics struct {
	appended    *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	violations  *prometheus.CounterVec
	conflicts   *prometheus.CounterVec
	checkpoints *prometheus.CounterVec
	size        *prometheus.GaugeVec
	batch       prometheus.Histogram
	appendLat   prometheus.Histogram
	commitLat   prometheus.Histogram
	cpLat       prometheus.Histogram
	signLat     prometheus.Histogram
}

func newMetrics() *metrics {
	lat := prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5ms .. ~4s
	return &metrics{
		appended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_appended_entries_total", Help: "Entries appended to the ledger (new leaves).",
		}, []string{"log"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_duplicate_entries_total", Help: "Entries whose id was already in the log with the same content.",
		}, []string{"log"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_integrity_violations_total", Help: "Integrity violations seen by the ledger, by kind.",
		}, []string{"log", "kind"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_rejected_requests_total", Help: "Append requests refused as a whole, by reason.",
		}, []string{"log", "reason"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_checkpoints_signed_total", Help: "Checkpoints signed.",
		}, []string{"log"}),
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_log_size_entries", Help: "Number of entries (tree size) of each log.",
		}, []string{"log"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ledger_commit_batch_entries", Help: "New entries written per group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		appendLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ledger_append_duration_seconds", Help: "Time from an append request reaching the ledger to its durable acknowledgement.",
			Buckets: lat,
		}),
		commitLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ledger_commit_duration_seconds", Help: "Time to write and sync one group commit.",
			Buckets: lat,
		}),
		cpLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ledger_checkpoint_latency_seconds", Help: "Time from an append request reaching the ledger to a signed checkpoint that covers it.",
			Buckets: lat,
		}),
		signLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ledger_checkpoint_sign_duration_seconds", Help: "Time to sign one checkpoint, store it and write its checkpoint file.",
			Buckets: lat,
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.appended, m.duplicates, m.violations, m.conflicts, m.checkpoints, m.size, m.batch, m.appendLat, m.commitLat, m.cpLat, m.signLat}
}

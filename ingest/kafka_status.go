package ingest

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collectors returns the source's Prometheus collectors.
func (k *Kafka) Collectors() []prometheus.Collector { return k.m.collectors() }

// Status is the state of one partition's ingestion, for GET /v1/logs/{log}.
type Status struct {
	Position
	// Assigned says this instance consumes the partition now.
	Assigned bool `json:"assigned"`
	// LastOffset is the last offset ledgered or skipped (-1: none yet).
	LastOffset int64 `json:"last_offset"`
	// HighWatermark and Lag are from the latest fetch (-1: unknown).
	HighWatermark int64 `json:"high_watermark"`
	Lag           int64 `json:"lag"`
}

// Status returns the ingestion state of the named log, or false if no
// Kafka partition feeds it.
func (k *Kafka) Status(log string) (*Status, bool) {
	k.mu.Lock()
	p := k.parts[log]
	hwm, hasHWM := k.hwm[log]
	k.mu.Unlock()
	var pos Position
	if p != nil {
		p.mu.Lock()
		pos = p.pos.clone()
		p.mu.Unlock()
		// The log's entries and position are visible as soon as they are
		// durable, a moment before the partition takes the position in:
		// never report less than the log holds.
		if d, ok := k.loggedPosition(log); ok && d.Next > pos.Next {
			pos = *d
		}
	} else {
		d, ok := k.loggedPosition(log)
		if !ok {
			return nil, false
		}
		pos = *d
	}
	st := &Status{Position: pos, Assigned: p != nil, LastOffset: pos.Next - 1, HighWatermark: -1, Lag: -1}
	if hasHWM {
		st.HighWatermark, st.Lag = hwm, max(hwm-pos.Next, 0)
	}
	return st, true
}

// loggedPosition is the source position the log last committed.
func (k *Kafka) loggedPosition(log string) (*Position, bool) {
	l, err := k.store.Log(log)
	if err != nil {
		return nil, false
	}
	b := l.SourcePosition()
	if b == nil {
		return nil, false
	}
	d, err := DecodePosition(b)
	if err != nil {
		return nil, false
	}
	return d, true
}

type kafkaMetrics struct {
	consumed, bytes, gaps, conflicts, redelivered, dupIDs, recreated *prometheus.CounterVec
	lag                                                              *prometheus.GaugeVec
	flagged, fetchErrors, restarts                                   prometheus.Counter
	ready, joined, stalled, unconsumed                               prometheus.Gauge
	durable                                                          prometheus.Histogram
}

func newKafkaMetrics() *kafkaMetrics {
	cv := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"log"})
	}
	return &kafkaMetrics{
		consumed:    cv("kafka_records_total", "Kafka records ledgered, by log."),
		bytes:       cv("kafka_record_bytes_total", "Bytes of Kafka record keys and values ledgered, by log."),
		gaps:        cv("kafka_gap_offsets_total", "Offsets a partition skipped (compaction, transaction markers, retention), by log."),
		conflicts:   cv("kafka_offset_conflicts_total", "Records re-read at an offset the log holds with different content (integrity violations), by log."),
		redelivered: cv("kafka_redelivered_records_total", "Records delivered again at an offset the log already holds, by log."),
		recreated:   cv("kafka_topic_recreated_total", "Times a partition's topic was found deleted and recreated (its topic id changed), by log: integrity violations."),
		dupIDs:      cv("kafka_duplicate_ids_total", "Records whose id header was taken by an earlier record of the partition, by log."),
		lag:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kafka_consumer_lag_records", Help: "Records between the ledger's position and the partition's high watermark, by log."}, []string{"log"}),
		flagged:     prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_flagged_records_total", Help: "Records ledgered with a mark (not JSON, not UTF-8, empty, oversize)."}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_fetch_errors_total", Help: "Errors fetching from the brokers."}),
		ready:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_ready", Help: "1 when the brokers answer and the topics exist."}),
		joined:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_group_joined", Help: "1 while the source is in its consumer group with an assignment."}),
		stalled:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_stalled_partitions", Help: "Assigned partitions with records to read and no progress within the stall window."}),
		unconsumed:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_unconsumed_partitions", Help: "Partitions of the consumed topics that no member of the group has consumed for longer than metadata_refresh plus stall_window."}),
		restarts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_consumer_restarts_total", Help: "Times the source replaced its Kafka consumer because it stalled or stayed out of its group."}),
		durable: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kafka_fetch_to_durable_seconds", Help: "Time from a poll returning records to their ledger entries being durable.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
}

func (m *kafkaMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.consumed, m.bytes, m.gaps, m.conflicts, m.redelivered, m.dupIDs, m.recreated, m.lag, m.flagged, m.fetchErrors, m.ready, m.joined, m.stalled, m.unconsumed, m.restarts, m.durable}
}

package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// KafkaRereadConfig schedules the Kafka source re-read (checks.kafka_reread,
// docs/checkers.md#kafka-source-re-read), which runs whenever a Kafka
// source is configured: ranges of each partition read again from the
// brokers and compared with the ledger's leaves. Two checkers: kafka_reread
// samples on a schedule; kafka_reread_full re-reads every retained offset,
// on demand (POST /v1/checks/kafka_reread_full/run) or every FullInterval.
type KafkaRereadConfig struct {
	// Interval is how often a sampled pass starts. 0: only on demand.
	// Default 1h.
	Interval time.Duration `yaml:"interval"`
	// FullInterval is how often a full pass starts. Default 0: only on
	// demand.
	FullInterval time.Duration `yaml:"full_interval"`
	// Rate bounds the records a pass compares per second; 0 is
	// unthrottled. Default 5000 (docs/checkers.md has what it costs).
	Rate float64 `yaml:"rate"`
	// Windows and Sample shape a sampled pass: Windows windows of Sample
	// consecutive records per partition (default 4 of 1000), plus the
	// records earlier passes found wrong.
	Windows int `yaml:"windows"`
	Sample  int `yaml:"sample"`
	// Timeout bounds each request to the brokers and each wait for
	// records; a broker slower than this fails the pass (default 30s).
	Timeout time.Duration `yaml:"timeout"`
}

func defaultKafkaReread() KafkaRereadConfig {
	return KafkaRereadConfig{Interval: time.Hour, Rate: 5000, Windows: 4, Sample: 1000, Timeout: 30 * time.Second}
}

func (c KafkaRereadConfig) validate() error {
	if c.Interval < 0 || c.FullInterval < 0 || c.Rate < 0 || c.Windows < 0 || c.Sample < 0 || c.Timeout < 0 {
		return fmt.Errorf("config: checks.kafka_reread: intervals, rate, windows, sample and timeout must not be negative")
	}
	return nil
}

// kafkaRereadCheckers are the sampled and the full re-read of the Kafka
// source's partitions, none without a Kafka source. Their collectors go to
// reg.
func kafkaRereadCheckers(store *ledger.Store, kafka *ingest.KafkaConfig, cfg KafkaRereadConfig, jitter time.Duration,
	reg prometheus.Registerer, logger *slog.Logger) ([]scheduledChecker, error) {
	if kafka == nil {
		return nil, nil
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := checkers.NewKafkaReread(store, *kafka, checkers.KafkaRereadOptions{Windows: cfg.Windows, Sample: cfg.Sample,
		Timeout: cfg.Timeout, Logger: logger})
	if err != nil {
		return nil, err
	}
	for _, col := range c.Collectors() {
		reg.MustRegister(col)
	}
	sched := func(every time.Duration) checkers.Schedule {
		return checkers.Schedule{Interval: every, Jitter: min(jitter, every/10), Rate: cfg.Rate}
	}
	return []scheduledChecker{{c, sched(cfg.Interval)}, {c.FullPass(), sched(cfg.FullInterval)}}, nil
}

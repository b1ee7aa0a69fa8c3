package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RetentionPolicy is how long one log, or the logs a pattern matches, keep
// their payloads. A payload is pruned once either limit says so; entries,
// leaves, tiles, indexes and checkpoints are kept forever.
type RetentionPolicy struct {
	// Log is a log name or a path.Match pattern ("payments.*").
	Log string
	// MaxAge prunes the payloads of entries older than this (0: no limit
	// by age).
	MaxAge time.Duration
	// KeepEntries keeps the payloads of the newest KeepEntries entries
	// only (0: no limit by count).
	KeepEntries uint64
}

// Matches reports whether the policy covers the named log.
func (p RetentionPolicy) Matches(log string) bool {
	ok, err := path.Match(p.Log, log)
	return p.Log == log || (err == nil && ok)
}

// Retention applies retention policies to a store's logs: each pass prunes,
// for each log, what the first policy matching it selects, up to the log's
// latest signed checkpoint, at a bounded rate.
type Retention struct {
	s         *Store
	policies  []RetentionPolicy
	interval  time.Duration
	rate      float64
	batch     int
	log       *slog.Logger
	now       func() time.Time
	guard     func(log string) error
	limit     func(log string) (uint64, error)
	pruned    *prometheus.CounterVec
	watermark *prometheus.GaugeVec
}

// RetentionOption configures a Retention.
type RetentionOption func(*Retention)

// WithRetentionInterval sets the time between passes (default 1h).
func WithRetentionInterval(d time.Duration) RetentionOption {
	return func(r *Retention) { r.interval = d }
}

// WithRetentionRate bounds the entries pruned per second of each log
// (default 50,000; 0 or less: no bound).
func WithRetentionRate(n float64) RetentionOption { return func(r *Retention) { r.rate = n } }

// WithRetentionBatch sets the entries rewritten per batch (default 4096).
func WithRetentionBatch(n int) RetentionOption { return func(r *Retention) { r.batch = n } }

// WithRetentionLogger sets the logger (default slog.Default()).
func WithRetentionLogger(l *slog.Logger) RetentionOption { return func(r *Retention) { r.log = l } }

// WithRetentionClock sets the clock max_age is measured on (default
// time.Now).
func WithRetentionClock(now func() time.Time) RetentionOption {
	return func(r *Retention) { r.now = now }
}

// WithRetentionGuard sets a check each log must pass before it is pruned:
// a log it refuses is skipped, with its error logged and returned by the
// pass.
func WithRetentionGuard(f func(log string) error) RetentionOption {
	return func(r *Retention) { r.guard = f }
}

// WithRetentionLimit bounds each pass of a log: nothing at or past the
// index f returns is pruned (0: nothing is); an error skips the log as
// the guard's does. The daemon bounds a derivation's sources by its
// snapshot, made by f.
func WithRetentionLimit(f func(log string) (uint64, error)) RetentionOption {
	return func(r *Retention) { r.limit = f }
}

// NewRetention returns the retention of the store's logs under policies.
func NewRetention(s *Store, policies []RetentionPolicy, opts ...RetentionOption) *Retention {
	r := &Retention{s: s, policies: policies, interval: time.Hour, rate: 50000, batch: 4096, log: slog.Default(), now: time.Now,
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_pruned_entries_total", Help: "Entries whose payload retention pruned.",
		}, []string{"log"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_prune_watermark_entries", Help: "The log's pruning watermark: the entries below it hold no payload.",
		}, []string{"log"}),
	}
	for _, o := range opts {
		o(r)
	}
	if r.interval <= 0 {
		r.interval = time.Hour
	}
	return r
}

// Collectors returns the retention's Prometheus collectors.
func (r *Retention) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.pruned, r.watermark}
}

// policy returns the first policy matching the log.
func (r *Retention) policy(log string) (RetentionPolicy, bool) {
	for _, p := range r.policies {
		if p.Matches(log) {
			return p, true
		}
	}
	return RetentionPolicy{}, false
}

// Run makes a pass at once and then every interval, until ctx ends. A log
// that fails to prune is logged and tried again next pass.
func (r *Retention) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		if err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("retention pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce makes one pass over the logs; it returns the first log's error,
// after trying every log.
func (r *Retention) RunOnce(ctx context.Context) error {
	var first error
	for _, info := range r.s.Logs() {
		p, ok := r.policy(info.Name)
		if !ok {
			continue
		}
		if err := r.pruneLog(ctx, info, p); err != nil {
			r.log.Error("retention: pruning failed", "log", info.Name, "err", err)
			if first == nil {
				first = err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return first
}

func (r *Retention) pruneLog(ctx context.Context, info LogInfo, p RetentionPolicy) error {
	if r.guard != nil {
		if err := r.guard(info.Name); err != nil {
			return fmt.Errorf("retention %s: %w", info.Name, err)
		}
	}
	l, err := r.s.Log(info.Name)
	if err != nil {
		return err
	}
	o := PruneOptions{BatchSize: r.batch, Rate: r.rate}
	if r.limit != nil {
		n, err := r.limit(info.Name)
		if err != nil {
			return fmt.Errorf("retention %s: %w", info.Name, err)
		}
		if n == 0 {
			return nil
		}
		o.UpTo = n
	}
	if p.KeepEntries > 0 && info.Size > p.KeepEntries {
		o.Before = info.Size - p.KeepEntries
	}
	if p.MaxAge > 0 {
		o.OlderThan = r.now().Add(-p.MaxAge)
	}
	start := time.Now()
	res, err := l.PrunePayloads(ctx, o)
	r.pruned.WithLabelValues(info.Name).Add(float64(res.Pruned))
	if err == nil || res.To > res.From {
		r.watermark.WithLabelValues(info.Name).Set(float64(res.To))
	}
	if err != nil {
		return fmt.Errorf("retention %s: %w", info.Name, err)
	}
	if res.Pruned > 0 {
		r.log.Info("retention: pruned payloads", "log", info.Name, "entries", res.Pruned, "bytes", res.PayloadBytes,
			"watermark", res.To, "checkpoint", res.Limit, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

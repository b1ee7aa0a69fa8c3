package main

import (
	"errors"
	"fmt"
	"math"
	"path"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/spec"
)

// RetentionConfig is serve's retention: which logs' payloads are pruned
// and when (docs/operations.md, "Retention"). Pruning deletes payloads and
// keeps every entry's leaf, the tiles, the indexes and the signed
// checkpoints, so every proof still verifies and every leaf still
// recomputes; pruned entries are served with payload_pruned: true.
//
//	retention:
//	  interval: 1h
//	  rate: 50000
//	  logs:
//	    - log: orders-http
//	      max_age: 720h
//	    - log: "payments.*"
//	      keep_entries: 10000000
//
// A policy may cover a log that a configured derivation reads (one of its
// sources): before each pass prunes such a log, the daemon snapshots the
// derivation's saved state (signed, bound to its pins and the spec's
// fingerprint) and prunes nothing at or past the snapshot's size of the
// log, so the derivation's later runs fold on from the snapshot
// (docs/derivations.md, "Snapshots"). A log whose derivation has no
// saved result yet (it has not run) is not pruned until it has one.
type RetentionConfig struct {
	// Interval is the time between two retention passes (default 1h).
	// A pass starts with the daemon.
	Interval time.Duration `yaml:"interval"`
	// Rate bounds the entries pruned per second of each log (default
	// 50000), so a pass does not crowd out ingestion; -1: no bound.
	Rate float64 `yaml:"rate"`
	// BatchEntries is the entries rewritten per Pebble batch (default 4096).
	BatchEntries int `yaml:"batch_entries"`
	// Logs are the policies; a log follows the first one that matches it.
	Logs []RetentionLogConfig `yaml:"logs"`
}

// RetentionLogConfig is one log's retention policy. A payload is pruned
// once either limit says so. Pruning removes a prefix of the log (it
// stops at the first entry neither limit selects) and never goes past the
// log's latest signed checkpoint.
type RetentionLogConfig struct {
	// Log is a log name or a path.Match pattern ("payments.*").
	Log string `yaml:"log"`
	// MaxAge prunes the payloads of entries whose time (the event time,
	// or the arrival time auditd assigned) is older than this.
	MaxAge time.Duration `yaml:"max_age"`
	// KeepEntries keeps the payloads of the log's newest KeepEntries
	// entries only.
	KeepEntries uint64 `yaml:"keep_entries"`
}

// validate checks the policies (a policy on a derivation's source is
// allowed: the daemon snapshots the derivation before pruning).
func (r *RetentionConfig) validate() error {
	if len(r.Logs) == 0 {
		return nil
	}
	if r.Interval < 0 || r.BatchEntries < 0 {
		return errors.New("config: retention: interval and batch_entries must not be negative")
	}
	for i, p := range r.Logs {
		if _, err := path.Match(p.Log, ""); p.Log == "" || err != nil {
			return fmt.Errorf("config: retention.logs[%d]: log %q: want a log name or a path.Match pattern", i, p.Log)
		}
		if p.MaxAge < 0 || (p.MaxAge == 0 && p.KeepEntries == 0) {
			return fmt.Errorf("config: retention.logs[%d] (%s): set max_age (positive) and/or keep_entries", i, p.Log)
		}
	}
	return nil
}

// overlaps reports whether two log names or patterns name one log: equal,
// or one matches the other. The retention limit (snapshotLimit) and the
// offline guard (derivationGuard) call it with a log's actual name.
func overlaps(a, b string) bool {
	m := func(pat, name string) bool { ok, err := path.Match(pat, name); return err == nil && ok }
	return a == b || m(a, b) || m(b, a)
}

// derivationGuard refuses to prune a log that a derivation reads
// (auditd prune, offline: it runs no derivation and makes no snapshot).
func derivationGuard(specs []*spec.Spec) func(log string) error {
	return func(log string) error {
		for _, s := range specs {
			for _, src := range s.Sources {
				if overlaps(src, log) {
					return fmt.Errorf("derivation %q reads log %s (its source %q): not pruned", s.Name, log, src)
				}
			}
		}
		return nil
	}
}

// startRetention starts the retention passes, if any policy is configured;
// they stop before the ledger closes. A reload replaces them
// (reload_live.go).
func (d *instance) startRetention() error {
	r, cols, err := d.buildRetention(d.cfg)
	if err != nil {
		return err
	}
	p := d.live
	p.mu.Lock()
	defer p.mu.Unlock()
	d.setRetention(p, r, cols, d.cfg)
	d.onStop("", p.stopPart(d, "stopping retention", &p.retentionStop))
	return nil
}

// newRetention returns the retention passes rc asks for, not running; nil
// without a policy.
func (d *instance) newRetention(rc RetentionConfig) (*ledger.Retention, error) {
	if len(rc.Logs) == 0 {
		return nil, nil
	}
	var ps []ledger.RetentionPolicy
	for _, p := range rc.Logs {
		ps = append(ps, ledger.RetentionPolicy{Log: p.Log, MaxAge: p.MaxAge, KeepEntries: p.KeepEntries})
	}
	limit, err := d.snapshotLimit()
	if err != nil {
		return nil, err
	}
	opts := []ledger.RetentionOption{ledger.WithRetentionLogger(d.log), ledger.WithRetentionLimit(limit)}
	if rc.Interval > 0 {
		opts = append(opts, ledger.WithRetentionInterval(rc.Interval))
	}
	if rc.Rate != 0 {
		opts = append(opts, ledger.WithRetentionRate(rc.Rate))
	}
	if rc.BatchEntries > 0 {
		opts = append(opts, ledger.WithRetentionBatch(rc.BatchEntries))
	}
	return ledger.NewRetention(d.store, ps, opts...), nil
}

// snapshotLimit returns the limit of each retention pass of a log: for a
// log no derivation reads, its checkpoint (no bound); else the smallest
// size at which the snapshots of the derivations reading it pin it, each
// snapshot made now from the derivation's saved result, signed with the
// checkpoint key. A derivation without a saved result stops the pruning
// of its sources (0). The derivations are those running at each pass (a
// reload may change them).
func (d *instance) snapshotLimit() (func(log string) (uint64, error), error) {
	bucket, err := d.store.Bucket("derive")
	if err != nil {
		return nil, err
	}
	return func(log string) (uint64, error) {
		limit, bounded := uint64(0), false
		for _, j := range d.runningJobs() {
			reads := false
			for _, src := range j.Spec.Sources {
				reads = reads || overlaps(src, log)
			}
			if !reads {
				continue
			}
			snap, err := rederive.SnapshotSaved(bucket, j.Derivation, spec.Fingerprint(j.Spec), d.key.signer)
			if err != nil {
				return 0, fmt.Errorf("snapshot of derivation %q: %w", j.Spec.Name, err)
			}
			n := uint64(0)
			if snap != nil {
				n = snap.Size(log)
			}
			if n == 0 {
				d.log.Info("retention: not pruned until derivation has a snapshot", "log", log, "derivation", j.Spec.Name)
			}
			if !bounded || n < limit {
				limit, bounded = n, true
			}
		}
		if !bounded {
			return math.MaxUint64, nil
		}
		return limit, nil
	}, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/auditd/auditd/ledger"
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
// A policy on a log that a configured derivation reads (one of its
// sources) is refused at load, naming the derivation: the derivation
// folds every payload of its sources from the start, and without state
// snapshots (not implemented yet) it could not run over a pruned range.
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

// validate checks the policies and refuses one on a log that a derivation
// of derivations (spec files) reads.
func (r *RetentionConfig) validate(derivations []string) error {
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
	if len(derivations) == 0 {
		return nil
	}
	specs, err := spec.Load(derivations...)
	if err != nil {
		return err
	}
	for _, s := range specs {
		for _, src := range s.Sources {
			for _, p := range r.Logs {
				if overlaps(p.Log, src) {
					return fmt.Errorf("config: retention: the policy on %q would prune payloads that derivation %q reads (its source %q): "+
						"a derivation folds its sources from the first entry, and state snapshots, which would let it start past a pruned range, "+
						"are not implemented yet; remove the policy or the derivation", p.Log, s.Name, src)
				}
			}
		}
	}
	return nil
}

// overlaps reports whether two log names or patterns name one log: equal,
// or one matches the other. Two patterns that only a third name matches
// (a.* and *.b) pass here; the guard of each pass (derivationGuard) then
// refuses to prune such a log by its actual name.
func overlaps(a, b string) bool {
	m := func(pat, name string) bool { ok, err := path.Match(pat, name); return err == nil && ok }
	return a == b || m(a, b) || m(b, a)
}

// derivationGuard refuses to prune a log that a derivation reads.
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
// they stop before the ledger closes.
func (d *instance) startRetention() error {
	rc := d.cfg.Retention
	if len(rc.Logs) == 0 {
		return nil
	}
	var ps []ledger.RetentionPolicy
	for _, p := range rc.Logs {
		ps = append(ps, ledger.RetentionPolicy{Log: p.Log, MaxAge: p.MaxAge, KeepEntries: p.KeepEntries})
	}
	var specs []*spec.Spec
	if len(d.cfg.Derivations) > 0 {
		var err error
		if specs, err = spec.Load(d.cfg.Derivations...); err != nil {
			return err
		}
	}
	opts := []ledger.RetentionOption{ledger.WithRetentionLogger(d.log), ledger.WithRetentionGuard(derivationGuard(specs))}
	if rc.Interval > 0 {
		opts = append(opts, ledger.WithRetentionInterval(rc.Interval))
	}
	if rc.Rate != 0 {
		opts = append(opts, ledger.WithRetentionRate(rc.Rate))
	}
	if rc.BatchEntries > 0 {
		opts = append(opts, ledger.WithRetentionBatch(rc.BatchEntries))
	}
	r := ledger.NewRetention(d.store, ps, opts...)
	for _, c := range r.Collectors() {
		d.metrics.MustRegister(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	d.onStop("stopping retention", func() { cancel(); <-done })
	d.log.Info("retention", "policies", len(ps), "interval", rc.Interval)
	return nil
}

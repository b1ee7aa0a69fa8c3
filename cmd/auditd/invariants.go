package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// InvariantsConfig declares invariants over derivations' state
// (checks.invariants, docs/checkers.md#invariants): CEL conditions each
// derivation's latest saved result must meet.
type InvariantsConfig struct {
	// Interval is how often the invariants are checked over the latest
	// saved result of each derivation, besides the check queued after each
	// derivation run. Default 1m; 0: only after runs and on demand.
	Interval time.Duration `yaml:"interval"`
	// Derivations maps a derivation's name (one of the derivations files)
	// to its invariants.
	Derivations map[string][]rederive.InvariantSpec `yaml:"derivations"`
	// file is the configuration file they were read from (loadConfig),
	// to place an invariant that does not compile.
	file string
}

// invariantCheckers is the invariant check as the daemon schedules it,
// none without invariants. An invariant of a derivation not among jobs,
// or one that does not compile, is refused; one read from the
// configuration file is placed at its file:line:col. A failing key's
// finding carries the derivation spec's lineage (default 5 entries).
func invariantCheckers(store *ledger.Store, v note.Verifier, jobs []rederive.Job, cfg InvariantsConfig) ([]scheduledChecker, error) {
	if len(cfg.Derivations) == 0 {
		return nil, nil
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("config: checks.invariants.interval must not be negative")
	}
	byName := map[string]rederive.Job{}
	for _, j := range jobs {
		byName[j.Spec.Name] = j
	}
	var targets []rederive.InvariantTarget
	for _, name := range slices.Sorted(maps.Keys(cfg.Derivations)) {
		j, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("config: checks.invariants: no derivation %q in the derivations files", name)
		}
		iv, err := rederive.CompileInvariants(name, cfg.Derivations[name])
		var ie *rederive.InvariantError
		if errors.As(err, &ie) && cfg.file != "" && ie.Line > 0 {
			ie.File = cfg.file
			return nil, ie // file:line:col: ..., as derivation spec errors
		}
		if err != nil {
			return nil, fmt.Errorf("config: checks.invariants: %w", err)
		}
		targets = append(targets, rederive.InvariantTarget{Derivation: j.Derivation, Invariants: iv, Lineage: j.Spec.Lineage})
	}
	b, err := store.Bucket("derive")
	if err != nil {
		return nil, err
	}
	return []scheduledChecker{{checkers.NewInvariantCheck(b, rederive.LocalLedger{Store: store}, v, targets),
		checkers.Schedule{Interval: cfg.Interval, Jitter: cfg.Interval / 10}}}, nil
}

// triggerInvariants queues a pass of the invariant check, if registered:
// the daemon calls it after each derivation run. Passes coalesce: one
// queued while one runs covers every run before it started.
func triggerInvariants(r *checkers.Runner) {
	_ = r.Trigger("invariants") // ErrUnknownChecker: no invariants configured
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// scheduledChecker is a checker with the schedule the daemon runs it on.
type scheduledChecker struct {
	checker  checkers.Checker
	schedule checkers.Schedule
}

// daemonCheckers are the self-audit checkers serve runs, with their
// schedules from the configuration. A checker whose interval is 0 is still
// registered: POST /v1/checks/{name}/run runs it on demand.
func daemonCheckers(store *ledger.Store, v note.Verifier, cfg ChecksConfig) []scheduledChecker {
	sched := func(every time.Duration, rate float64) checkers.Schedule {
		return checkers.Schedule{Interval: every, Jitter: min(cfg.Jitter, every/10), Rate: rate}
	}
	src := checkers.StoreSource(store)
	return []scheduledChecker{
		{checkers.NewScrub(src, v), sched(cfg.ScrubInterval, cfg.ScrubRate)},
		{checkers.NewCheckpointAudit(src, v), sched(cfg.CheckpointAuditInterval, cfg.CheckpointAuditRate)},
	}
}

// startChecks registers the daemon's checkers on a Runner whose records
// live in the ledger's "checks" bucket, raises their findings as alerts,
// and runs their schedules until stop is called; stop returns when the
// Runner has stopped (a pass in progress stops promptly).
func startChecks(store *ledger.Store, v note.Verifier, cfg ChecksConfig, alerts *alert.Manager,
	reg prometheus.Registerer, logger *slog.Logger) (r *checkers.Runner, stop func(), err error) {
	kv, err := store.Bucket("checks")
	if err != nil {
		return nil, nil, err
	}
	r = checkers.NewRunner(kv, checkers.Options{Logger: logger, OnPass: func(pr checkers.PassResult) {
		// A pass stopped by shutdown may end after the alert manager has
		// closed; its findings are logged and counted all the same.
		if err := raiseCheckAlerts(alerts, pr); err != nil && !errors.Is(err, alert.ErrClosed) {
			logger.Error("check alerts not updated", "checker", pr.Checker, "err", err)
		}
	}})
	peers, err := peerCheckers(store, v, cfg.Peers)
	if err != nil {
		return nil, nil, err
	}
	invariants, err := invariantCheckers(store, v, cfg.jobs, cfg.Invariants)
	if err != nil {
		return nil, nil, err
	}
	rereads, err := kafkaRereadCheckers(store, cfg.kafka, cfg.KafkaReread, cfg.Jitter, reg, logger)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range slices.Concat(daemonCheckers(store, v, cfg), peers, invariants, rereads) {
		if err := r.Register(c.checker, c.schedule); err != nil {
			return nil, nil, err
		}
		if c.schedule.Interval > 0 {
			logger.Info("self-audit scheduled", "checker", c.checker.Name(), "interval", c.schedule.Interval,
				"jitter", c.schedule.Jitter, "rate", c.schedule.Rate)
		} else { // no interval: it runs when asked (POST /v1/checks/{name}/run)
			logger.Info("self-audit scheduled", "checker", c.checker.Name(), "interval", "on-demand", "rate", c.schedule.Rate)
		}
	}
	for _, c := range slices.Concat(r.Collectors(), checkerCollectors(peers)) {
		reg.MustRegister(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	return r, func() { cancel(); <-done }, nil
}

// maxAlertFindings bounds the findings an alert's details carry; the rest
// are at /v1/checks/{checker}.
const maxAlertFindings = 20

// raiseCheckAlerts turns a pass into integrity alerts, one per log and
// kind of finding, with a stable id so that the next pass updates it. A
// complete pass also resolves the checker's alerts it no longer finds; an
// incomplete one (it failed or was stopped) says nothing of what it did
// not reach and resolves nothing.
func raiseCheckAlerts(m *alert.Manager, pr checkers.PassResult) error {
	prefix := alert.CheckPrefix(pr.Checker)
	byKey := map[checkers.LogKind][]checkers.Finding{}
	for _, f := range pr.Findings {
		k := checkers.LogKind{Log: f.Log, Kind: f.Kind}
		if len(byKey[k]) < maxAlertFindings {
			byKey[k] = append(byKey[k], f)
		}
	}
	keys := make([]checkers.LogKind, 0, len(pr.Counts))
	for k := range pr.Counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].Log < keys[j].Log || keys[i].Log == keys[j].Log && keys[i].Kind < keys[j].Kind
	})
	var errs []error
	keep := map[string]bool{}
	for _, k := range keys {
		n := pr.Counts[k]
		d, _ := json.Marshal(map[string]any{"checker": pr.Checker, "log": k.Log, "kind": k.Kind, "count": n,
			"findings": byKey[k], "complete": pr.Complete, "status": "/v1/checks/" + pr.Checker})
		a := alert.CheckFinding(pr.Checker, k.Log, k.Kind, n, findingSeverity(k.Kind), d)
		keep[a.ID] = true
		_, err := m.Fire(a)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if pr.Complete {
		for _, a := range m.List(alert.Filter{State: alert.StateFiring, Kind: alert.KindIntegrity}) {
			if strings.HasPrefix(a.ID, prefix) && !keep[a.ID] {
				if err := m.Resolve(a.ID); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

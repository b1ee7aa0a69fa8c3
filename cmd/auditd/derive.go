package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// openAlerts starts the alert manager on the ledger's database with the
// configured webhook sinks.
func openAlerts(store *ledger.Store, cfg Config, logger *slog.Logger) (*alert.Manager, error) {
	kv, err := store.Bucket("alerts")
	if err != nil {
		return nil, err
	}
	var sinks []alert.Sink
	for i, w := range cfg.Webhooks {
		name := w.Name
		if name == "" {
			name = fmt.Sprintf("webhook-%d", i+1)
		}
		headers := map[string]string{}
		for k, v := range w.Headers {
			headers[k] = v // ${VAR} expanded by loadConfig
		}
		wc := alert.WebhookConfig{Name: name, URL: w.URL, Headers: headers, Timeout: w.Timeout, MaxRetries: w.MaxRetries, ExternalURL: cfg.ExternalURL}
		if err := wc.Validate(); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		sinks = append(sinks, alert.NewWebhook(wc))
	}
	return alert.NewManager(kv, alert.Options{Sinks: sinks, Logger: logger})
}

// startDerivations compiles the configured derivations and starts the
// daemon that checks them until ctx ends; done closes when it has stopped.
// It returns a nil daemon when none are configured.
// onRun, if set, is told the name of each derivation after each of its runs
// (the invariant check runs then).
func startDerivations(ctx context.Context, store *ledger.Store, cfg Config, alerts *alert.Manager, reg prometheus.Registerer, logger *slog.Logger,
	onRun func(derivation string)) (daemon *rederive.Daemon, done <-chan struct{}, err error) {
	if len(cfg.Derivations) == 0 {
		return nil, nil, nil
	}
	specs, err := rederive.LoadSpecs(cfg.Derivations...)
	if err != nil {
		return nil, nil, err
	}
	var jobs []rederive.Job
	for _, s := range specs {
		d, err := rederive.Compile(s)
		if err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, rederive.Job{Spec: s, Derivation: d})
	}
	bucket, err := store.Bucket("derive")
	if err != nil {
		return nil, nil, err
	}
	m := rederive.NewMetrics()
	for _, c := range m.Collectors() {
		reg.MustRegister(c)
	}
	runner := &rederive.Runner{Ledger: rederive.LocalLedger{Store: store}, Bucket: bucket, Workers: cfg.DerivationWorkers, Logger: logger, Metrics: m}
	daemon = rederive.NewDaemon(runner, jobs)
	daemon.OnReport = func(_ rederive.Job, rep *rederive.Report) {
		if err := raiseReportAlerts(alerts, rep); err != nil {
			logger.Error("alerts not updated", "derivation", rep.Derivation, "err", err)
		}
		if onRun != nil {
			onRun(rep.Derivation)
		}
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		daemon.Run(ctx)
	}()
	logger.Info("checking derivations", "count", len(jobs), "files", cfg.Derivations)
	return daemon, ch, nil
}

// maxAlertDrift bounds the drifted keys an alert's details carry; the full
// report is at /v1/derivations/{name}/runs/latest.
const maxAlertDrift = 20

// raiseReportAlerts turns a run's report into alerts: confirmed drift, a
// store error, a derivation error, an incremental fold that disagrees with
// the full one. A condition the report no longer shows resolves; a run in
// error says nothing about drift, so drift alerts stay as they were.
func raiseReportAlerts(m *alert.Manager, rep *rederive.Report) error {
	name := rep.Derivation
	details := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	var errs []error
	sync := func(kind alert.Kind, firing ...alert.Alert) {
		if err := m.Sync(kind, name, firing); err != nil {
			errs = append(errs, err)
		}
	}
	labels := map[string]string{"derivation": name}
	if rep.State != rederive.StateError {
		if rep.State == rederive.StateDrift {
			drift := rep.Drift
			if len(drift) > maxAlertDrift {
				drift = drift[:maxAlertDrift]
			}
			sync(alert.KindDrift, alert.Alert{ID: "drift/" + name, Labels: labels,
				Summary: fmt.Sprintf("derivation %s: %d keys drifted from the ledger (%d missing, %d extra, %d mismatched)",
					name, rep.Confirmed, rep.Stats.Missing, rep.Stats.Extra, rep.Stats.Mismatched),
				Details: details(map[string]any{"pins": rep.Pins, "confirmed": rep.Confirmed, "pending": rep.Pending,
					"drift": drift, "report": "/v1/derivations/" + name + "/runs/latest"})})
		} else {
			sync(alert.KindDrift)
		}
	}
	if rep.State == rederive.StateError && rep.ErrorKind == rederive.ErrKindStore {
		sync(alert.KindStoreError, alert.Alert{ID: "store_error/" + name, Labels: labels,
			Summary: fmt.Sprintf("derivation %s: the derived store cannot be checked: %s", name, rep.Error),
			Details: details(map[string]any{"error": rep.Error})})
	} else {
		sync(alert.KindStoreError)
	}
	if rep.State == rederive.StateError && rep.ErrorKind != rederive.ErrKindStore {
		sync(alert.KindDerivationError, alert.Alert{ID: "derivation_error/" + name, Labels: labels,
			Summary: fmt.Sprintf("derivation %s failed (%s): %s", name, rep.ErrorKind, rep.Error),
			Details: details(map[string]any{"kind": rep.ErrorKind, "error": rep.Error, "errors": rep.Errors})})
	} else {
		sync(alert.KindDerivationError)
	}
	if len(rep.IncrementalMismatch) > 0 {
		sync(alert.KindIntegrity, alert.Alert{ID: "integrity/derivation/" + name, Labels: labels,
			Summary: fmt.Sprintf("derivation %s: the incremental state differs from a full fold on %d keys", name, len(rep.IncrementalMismatch)),
			Details: details(map[string]any{"keys": rep.IncrementalMismatch})})
	} else if rep.Mode == "full" && rep.State != rederive.StateError {
		sync(alert.KindIntegrity)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// raiseViolation turns a Kafka integrity violation into an alert.
func raiseViolation(m *alert.Manager, v ingest.Violation, logger *slog.Logger) {
	d, _ := json.Marshal(v)
	_, err := m.Fire(alert.Alert{ID: "integrity/" + v.Log + "/" + v.Kind, Kind: alert.KindIntegrity, Subject: v.Log,
		Labels:  map[string]string{"log": v.Log, "violation": v.Kind},
		Summary: fmt.Sprintf("log %s: %s", v.Log, v.Detail), Details: d})
	if err != nil {
		logger.Error("integrity alert not raised", "log", v.Log, "err", err)
	}
}

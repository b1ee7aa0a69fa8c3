package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

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
	sinks, err := webhookSinks(cfg)
	if err != nil {
		return nil, err
	}
	return alert.NewManager(kv, alert.Options{Sinks: sinks, Logger: logger})
}

// webhookSinks builds the configured webhooks (cfg.Webhooks, their links
// to cfg.ExternalURL), validated; a reload builds them before it swaps
// them in (alert.Manager.SetSinks).
func webhookSinks(cfg Config) ([]alert.Sink, error) {
	var sinks []alert.Sink
	seen := map[string]bool{}
	for i, w := range cfg.Webhooks {
		name := w.Name
		if name == "" {
			name = fmt.Sprintf("webhook-%d", i+1)
		}
		if seen[name] {
			return nil, fmt.Errorf("config: webhooks[%d]: two webhooks named %q", i, name)
		}
		seen[name] = true
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
	return sinks, nil
}

// loadJobs is rederive.LoadJobs; a test counts its calls.
var loadJobs = rederive.LoadJobs

// loadDerivations loads and compiles the derivation spec files, once for
// everything serve does with them (the daemon, the invariants, retention's
// snapshots), and logs their warnings. serve calls it before it makes the
// data dir and the key, so a spec that does not compile leaves neither.
func loadDerivations(files []string, logger *slog.Logger) ([]rederive.Job, error) {
	jobs, warnings, err := loadJobs(files...)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		logger.Warn("derivation spec", "warning", w.String())
	}
	return jobs, nil
}

// startDerivations starts the daemon that checks the compiled derivations
// until ctx ends; done closes when it has stopped. It returns a nil daemon
// when none are configured. m are the runner's metrics, registered once by
// the caller and reused by every daemon a reload starts. onRun, if set, is
// told the name of each derivation after each of its runs (the invariant
// check runs then).
func startDerivations(ctx context.Context, store *ledger.Store, jobs []rederive.Job, cfg Config, alerts *alert.Manager, m *rederive.Metrics, logger *slog.Logger,
	onRun func(derivation string)) (daemon *rederive.Daemon, done <-chan struct{}, err error) {
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	bucket, err := store.Bucket("derive")
	if err != nil {
		return nil, nil, err
	}
	runner := rederive.NewRunner(rederive.LocalLedger{Store: store}, rederive.WithBucket(bucket), rederive.WithWorkers(cfg.DerivationWorkers), rederive.WithLogger(logger), rederive.WithMetrics(m))
	daemon = rederive.NewDaemon(runner, jobs, rederive.WithOnReport(func(_ rederive.Job, rep *rederive.Report) {
		if err := rederive.RaiseAlerts(alerts, rep); err != nil {
			logger.Error("alerts not updated", "derivation", rep.Derivation, "err", err)
		}
		if onRun != nil {
			onRun(rep.Derivation)
		}
	}))
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		daemon.Run(ctx)
	}()
	logger.Info("checking derivations", "count", len(jobs), "files", cfg.Derivations)
	return daemon, ch, nil
}

// raiseViolation turns a Kafka integrity violation into an alert.
func raiseViolation(m *alert.Manager, v ingest.Violation, logger *slog.Logger) {
	d, _ := json.Marshal(v)
	_, err := m.Fire(alert.LogViolation(v.Log, v.Kind, v.Detail, d))
	if err != nil {
		logger.Error("integrity alert not raised", "log", v.Log, "err", err)
	}
}

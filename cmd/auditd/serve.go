package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

func runServe(args []string) error {
	cfg, err := loadConfig(configPath(args))
	if err != nil {
		return err
	}
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	fset.String("config", "", "YAML configuration file (flags override it)")
	bindFlags(fset, &cfg)
	kf := bindKafkaFlags(fset)
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "Usage: auditd serve [flags]\n\nRuns the ledger and its HTTP API. With no flags: data in ./auditd-data,\nHTTP on 127.0.0.1:8080, a signing key generated on first start.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Errorf("serve takes no arguments (got %q); flags go before any argument", fset.Args())}
	}
	kf.apply(fset, &cfg)
	if err := cfg.validate(); err != nil {
		return err
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, cfg, logger, nil)
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// serve runs the daemon until ctx ends. If ready is not nil it receives the
// listening address once the server accepts connections.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- string) error {
	// Bind first: a port in use leaves no data dir and no key behind.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	// Files the ledger creates (Pebble's) are the operator's alone.
	umask(0o077)
	if err := ensureDataDir(cfg.DataDir, logger); err != nil {
		return err
	}
	key, created, err := loadOrCreateKey(cfg.KeyFile, cfg.Origin)
	if err != nil {
		return err
	}
	if err := checkKeyMode(cfg.KeyFile, cfg.AllowInsecureKeyFile, logger); err != nil {
		return err
	}
	if created {
		logger.Info("generated checkpoint signing key", "file", cfg.KeyFile, "verifier_key", key.vkey)
	}
	integrity := newIntegrityAlerts(logger)
	store, err := ledger.Open(cfg.DataDir, key.signer, key.verifier,
		ledger.WithIntegrityHandler(integrity.handle),
		ledger.WithCheckpointInterval(cfg.CheckpointInterval),
		ledger.WithMaxBatch(cfg.MaxBatch),
		ledger.WithBatchDelay(cfg.BatchDelay),
		ledger.WithCacheSize(cfg.CacheBytes),
		ledger.WithLogger(logger),
		ledger.WithCheckpointDir(cfg.CheckpointDir),
		ledger.WithReadOnlyOnRollback(cfg.RollbackReadOnly))
	if err != nil {
		return explainLock(cfg.DataDir, err)
	}
	defer func() {
		if err := store.Close(); err != nil {
			logger.Error("closing ledger", "err", err)
		}
	}()
	for _, name := range cfg.Logs {
		if _, err := store.CreateLog(name); err != nil {
			if errors.Is(err, ledger.ErrReadOnly) { // --rollback-read-only: already reported
				logger.Warn("configured log is read-only", "log", name, "err", err)
				continue
			}
			return err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	auditdReg := prometheus.WrapRegistererWithPrefix("auditd_", reg)
	for _, c := range store.Collectors() {
		auditdReg.MustRegister(c)
	}
	alerts, err := openAlerts(store, cfg, logger)
	if err != nil {
		return err
	}
	defer alerts.Close()
	defer integrity.start(alerts)() // raises what the store found while opening too; stops before alerts close
	for _, c := range alerts.Collectors() {
		auditdReg.MustRegister(c)
	}

	var kafka *ingest.Kafka
	if cfg.Kafka != nil {
		kcfg := cfg.kafkaConfig(key.vkey)
		if kafka, err = ingest.NewKafka(store, kcfg, logger); err != nil {
			return err
		}
		for _, c := range kafka.Collectors() {
			auditdReg.MustRegister(c)
		}
		kafka.OnViolation = func(v ingest.Violation) { raiseViolation(alerts, v, logger) }
		kctx, cancel := context.WithCancel(context.Background())
		kdone := make(chan struct{})
		go func() {
			defer close(kdone)
			if err := kafka.Run(kctx); err != nil {
				logger.Error("kafka source stopped", "err", err)
			}
		}()
		// Runs before the ledger closes (defers run last first): the
		// source finishes its batches in hand and commits group offsets.
		defer func() {
			logger.Info("shutting down: stopping the Kafka source")
			cancel()
			<-kdone
		}()
		logger.Info("consuming Kafka", "brokers", cfg.Kafka.Brokers, "topics", cfg.Kafka.Topics, "group", cfg.Kafka.Group, "instance_id", kcfg.InstanceID)
	}
	opts := api.Options{
		MaxBodyBytes: cfg.MaxBodyBytes, MaxEvents: cfg.MaxEvents, MaxPayloadBytes: cfg.MaxPayloadBytes,
		WriteToken: cfg.WriteToken, ReadToken: cfg.ReadToken, CreateLogs: cfg.CreateLogs == nil || *cfg.CreateLogs,
		MaxConcurrentWrites: cfg.MaxConcurrentWrites, WaitTimeout: cfg.WaitTimeout, Logger: logger,
		BodyTimeout: cfg.BodyTimeout, MaxInflightBytes: cfg.MaxInflightBytes, MaxLogs: cfg.MaxLogs,
		Metrics: promhttp.HandlerFor(boundLogLabels(reg, cfg.MaxMetricLogs), promhttp.HandlerOpts{Registry: reg}),
	}
	opts.Alerts = alerts
	dctx, dcancel := context.WithCancel(context.Background())
	var checksRunner atomic.Pointer[checkers.Runner] // set once the checks start
	afterRun := func(string) {
		if r := checksRunner.Load(); r != nil {
			triggerInvariants(r)
		}
	}
	daemon, ddone, err := startDerivations(dctx, store, cfg, alerts, auditdReg, logger, afterRun)
	if err != nil {
		dcancel()
		return err
	}
	if daemon != nil {
		opts.Derivations = daemon
		defer func() { // runs before the ledger closes
			dcancel()
			<-ddone
		}()
	} else {
		dcancel()
	}
	checks, stopChecks, err := startChecks(store, key.verifier, cfg.Checks, alerts, auditdReg, logger)
	if err != nil {
		return err
	}
	defer stopChecks() // runs before the ledger closes
	checksRunner.Store(checks)
	opts.Checks = checks
	if kafka != nil {
		opts.SourceStatus = func(log string) (any, bool) { return kafka.Status(log) }
		opts.Ready = kafka.Ready
	}
	stopWitness, err := startWitnessing(store, cfg, key.signer.Name(), &opts, auditdReg, logger) // witness.go
	if err != nil {
		return err
	}
	defer stopWitness() // runs before the ledger closes
	srv := api.New(store, key.vkey, opts)
	for _, c := range srv.Collectors() {
		auditdReg.MustRegister(c)
	}

	if cfg.DebugListen != "" {
		dl, err := net.Listen("tcp", cfg.DebugListen)
		if err != nil {
			return fmt.Errorf("debug listen %s: %w", cfg.DebugListen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		ds := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go ds.Serve(dl)
		defer ds.Close()
		logger.Info("serving Go profiles", "addr", "http://"+dl.Addr().String()+"/debug/pprof/")
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	// Shutdown does not end open event streams (/v1/alerts/stream); closing
	// the alert manager does.
	hs.RegisterOnShutdown(func() { alerts.Close() })
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	addr := ln.Addr().String()
	logger.Info("auditd serving", "addr", "http://"+addr, "data_dir", cfg.DataDir,
		"logs", len(store.Logs()), "verifier_key", key.vkey, "writes_protected", cfg.WriteToken != "" || cfg.ReadToken != "", "auth", authSummary(cfg))
	if ready != nil {
		ready <- addr
	}
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: draining HTTP requests", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		logger.Warn("HTTP shutdown incomplete", "err", err)
	}
	logger.Info("shutting down: signing final checkpoints and closing the ledger")
	return nil
}

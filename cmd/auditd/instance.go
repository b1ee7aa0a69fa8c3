package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/buildinfo"
	"github.com/auditd/auditd/internal/tlsconf"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/web"
)

// instance is what serve runs: the ledger and the components around it.
//
// The components serve depends on run in one errgroup, as Sunlight runs
// its logs: the HTTP server and the Kafka source.
// When one of them stops on its own (an error, or a return nobody asked
// for) serve logs "component stopped on its own: shutting down" naming it,
// shuts everything down in order and exits 1 with its error: a daemon
// that no longer serves, consumes or checks must not look healthy to its
// supervisor. The derivation daemon, the self-audit checks and the debug
// (pprof) listener are not in the group: rederive.Daemon.Run and
// checkers.Runner.Run return only when their context ends (a reload
// replaces them, reload_live.go), and the debug listener is an aid whose
// loss does not stop auditd's work.
//
// Shutdown runs the stop steps last registered first, each logged as it
// starts: HTTP drained, the checks, the derivations and the Kafka source
// stopped, then the ledger signs its final checkpoints and closes, and a
// last line says so.
type instance struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // ends with serve's context or when a component stops
	g      *errgroup.Group
	stopMu sync.Mutex
	stops  []stopStep
	// stopping is set once shutdown starts: a component returning after
	// it was asked to.
	stopping atomic.Bool

	started time.Time      // when serve began (GET /v1/info)
	jobs    []rederive.Job // the derivations at start, compiled once (loadDerivations); live.derivs has those running now
	live    *liveParts     // what a reload replaces (reload_live.go)
	key     *signingKey
	store   *ledger.Store
	reg     *prometheus.Registry
	metrics prometheus.Registerer // reg with the auditd_ prefix
	alerts  *alert.Manager
	opts    api.Options
	tls     *tlsconf.Server          // the API listener's, nil without TLS (tls.go)
	reload  atomic.Pointer[reloader] // set once the API is built (reload.go)
}

type stopStep struct {
	what string // logged as "shutting down: <what>"; "" logs nothing
	fn   func()
}

func newInstance(ctx context.Context, cfg Config, logger *slog.Logger) *instance {
	g, gctx := errgroup.WithContext(ctx)
	return &instance{cfg: cfg, log: logger, ctx: gctx, g: g, started: time.Now(), live: &liveParts{}}
}

// onStop adds a step to the shutdown; steps run last added first.
func (d *instance) onStop(what string, fn func()) {
	d.stopMu.Lock()
	d.stops = append(d.stops, stopStep{what, fn})
	d.stopMu.Unlock()
}

// shutdown runs the stop steps, once; later calls do nothing.
func (d *instance) shutdown() {
	d.stopping.Store(true)
	d.stopMu.Lock()
	stops := d.stops
	d.stops = nil
	d.stopMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		if stops[i].what != "" {
			d.log.Info("shutting down: " + stops[i].what)
		}
		stops[i].fn()
	}
}

// goComponent runs a component serve depends on in the group; done
// closes when run has returned. A return before shutdown ends serve.
func (d *instance) goComponent(name string, run func() error) (done <-chan struct{}) {
	ch := make(chan struct{})
	d.g.Go(func() error {
		defer close(ch)
		err := run()
		if d.stopping.Load() {
			if err != nil {
				d.log.Error(name+" stopped", "err", err)
			}
			return nil
		}
		if err == nil {
			err = errors.New("returned")
		}
		d.log.Error("component stopped on its own: shutting down", "component", name, "err", err)
		return fmt.Errorf("%s stopped: %w", name, err)
	})
	return ch
}

// openLedger makes the data dir, loads or creates the key, opens the
// ledger and creates the configured logs.
func (d *instance) openLedger() error {
	cfg, logger := d.cfg, d.log
	// Files the ledger creates (Pebble's) are the operator's alone.
	umask(0o077)
	if err := ensureDataDir(cfg.DataDir, logger); err != nil {
		return err
	}
	key, created, err := openSigningKey(cfg.KeyFile, cfg.Origin, logger)
	if err != nil {
		return err
	}
	if err := checkKeyMode("signing key", cfg.KeyFile, cfg.AllowInsecureKeyFile, logger); err != nil {
		return err
	}
	if created {
		logger.Info("generated checkpoint signing key", "file", cfg.KeyFile, "verifier_key", key.vkey)
	}
	d.key = key
	guard, err := cfg.checkpointGuard(logger)
	if err != nil {
		return err
	}
	integrity := newIntegrityAlerts(logger)
	space := newSpaceAlerts(logger)
	store, err := ledger.Open(cfg.DataDir, key.signer, key.verifier,
		ledger.WithIntegrityHandler(integrity.handle),
		ledger.WithCheckpointInterval(cfg.CheckpointInterval),
		ledger.WithMaxBatch(cfg.MaxBatch),
		ledger.WithBatchDelay(cfg.BatchDelay),
		ledger.WithCacheSize(cfg.CacheBytes),
		ledger.WithDiskReserve(cfg.DiskReserveBytes),
		ledger.WithDiskSpaceHandler(space.handle),
		ledger.WithLogger(logger),
		ledger.WithCheckpointDir(cfg.CheckpointDir),
		ledger.WithCheckpointGuardDir(guard),
		ledger.WithReadOnlyOnRollback(cfg.RollbackReadOnly))
	if err != nil {
		return explainLock(cfg.DataDir, err)
	}
	d.store = store
	d.onStop("signing final checkpoints and closing the ledger", func() {
		if err := store.Close(); err != nil {
			logger.Error("closing ledger", "err", err)
			return
		}
		logger.Info("shut down: the ledger is closed")
	})
	for _, name := range cfg.Logs {
		if _, err := store.CreateLog(name); err != nil {
			if errors.Is(err, ledger.ErrReadOnly) { // --rollback-read-only: already reported
				logger.Warn("configured log is read-only", "log", name, "err", err)
				continue
			}
			return err
		}
	}
	d.reg = prometheus.NewRegistry()
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.metrics = prometheus.WrapRegistererWithPrefix("auditd_", d.reg)
	d.metrics.MustRegister(buildinfo.Read().Collector())
	for _, c := range store.Collectors() {
		d.metrics.MustRegister(c)
	}
	alerts, err := openAlerts(store, cfg, logger)
	if err != nil {
		return err
	}
	d.alerts = alerts
	d.onStop("", func() { alerts.Close() })
	d.onStop("", integrity.start(alerts)) // raises what the store found while opening too; stops before alerts close
	d.onStop("", space.start(alerts))
	for _, c := range alerts.Collectors() {
		d.metrics.MustRegister(c)
	}
	return nil
}

// kafkaRun runs the Kafka source; tests replace it to make the source die.
var kafkaRun = func(k *ingest.Kafka, ctx context.Context) error { return k.Run(ctx) }

// startComponents starts the Kafka source, the derivations and the
// self-audit checks, and fills in the API's options.
func (d *instance) startComponents() error {
	cfg, logger := d.cfg, d.log
	d.opts = api.Options{
		Limits: api.Limits{
			MaxBodyBytes: cfg.MaxBodyBytes, MaxEvents: cfg.MaxEvents, MaxPayloadBytes: cfg.MaxPayloadBytes,
			CreateLogs: cfg.CreateLogs == nil || *cfg.CreateLogs, MaxLogs: cfg.MaxLogs,
			MaxConcurrentWrites: cfg.MaxConcurrentWrites, WaitTimeout: cfg.WaitTimeout,
			BodyTimeout: cfg.BodyTimeout, MaxInflightBytes: cfg.MaxInflightBytes, MaxStreams: cfg.MaxStreams,
		},
		Auth: api.Tokens{Write: cfg.WriteToken, Read: cfg.ReadToken},
		Components: api.Components{
			Metrics: promhttp.HandlerFor(boundLogLabels(d.reg, cfg.MaxMetricLogs), promhttp.HandlerOpts{Registry: d.reg}),
			Alerts:  d.alerts,
		},
		Logger: logger,
	}
	if err := d.startKafka(); err != nil {
		return err
	}
	// The derivations, the checks, the witness submitter and retention
	// are live parts: a reload replaces them (reload_live.go). Their
	// shutdown steps stop whichever runs then.
	p := d.live
	p.mu.Lock()
	defer p.mu.Unlock()
	p.derivs.metrics = rederive.NewMetrics()
	for _, c := range p.derivs.metrics.Collectors() {
		d.metrics.MustRegister(c)
	}
	p.specDigest = specDigest(cfg.Derivations)
	if err := d.startLiveDerivations(p, d.jobs, cfg); err != nil {
		return err
	}
	d.opts.Components.Derivations = &p.derivs
	d.onStop("", p.stopPart(d, "stopping the derivation checks", &p.derivStop))
	checks, stopChecks, cols, err := d.buildChecks(cfg, d.jobs)
	if err != nil {
		return err
	}
	d.setChecks(p, checks, stopChecks, cols)
	d.onStop("", p.stopPart(d, "stopping the self-audit checks", &p.checksStop))
	d.opts.Components.Checks = &p.checks
	return nil
}

// startKafka starts the Kafka source, if configured.
func (d *instance) startKafka() error {
	cfg, logger := d.cfg, d.log
	if cfg.Kafka == nil {
		return nil
	}
	kcfg := cfg.kafkaConfig(d.key.vkey)
	alerts := d.alerts
	kafka, err := ingest.NewKafka(d.store, kcfg, logger,
		ingest.WithViolationHandler(func(v ingest.Violation) { raiseViolation(alerts, v, logger) }))
	if err != nil {
		return err
	}
	for _, c := range kafka.Collectors() {
		d.metrics.MustRegister(c)
	}
	kctx, cancel := context.WithCancel(context.Background())
	done := d.goComponent("kafka source", func() error { return kafkaRun(kafka, kctx) })
	// The source finishes its batches in hand and commits group offsets
	// before the ledger closes.
	d.onStop("stopping the Kafka source", func() { cancel(); <-done })
	d.opts.Components.Sources = api.SourcesFunc(func(log string) (any, bool) { return kafka.Status(log) })
	d.opts.Components.Ready = kafka
	logger.Info("consuming Kafka", "brokers", cfg.Kafka.Brokers, "topics", cfg.Kafka.Topics, "group", cfg.Kafka.Group, "instance_id", kcfg.InstanceID)
	return nil
}

// startDebug serves Go profiles on the debug listener, if configured.
func (d *instance) startDebug() error {
	if d.cfg.DebugListen == "" {
		return nil
	}
	dl, err := net.Listen("tcp", d.cfg.DebugListen)
	if err != nil {
		return fmt.Errorf("debug listen %s: %w", d.cfg.DebugListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ds := &http.Server{Handler: api.BodyDeadline(mux, d.cfg.BodyTimeout), ReadHeaderTimeout: 10 * time.Second}
	go ds.Serve(dl)
	d.onStop("", func() { ds.Close() })
	d.log.Info("serving Go profiles", "addr", "http://"+dl.Addr().String()+"/debug/pprof/")
	return nil
}

// serveHTTP serves the API on ln as a component; shutdown drains it first.
func (d *instance) serveHTTP(srv http.Handler, ln net.Listener) {
	hs := &http.Server{Handler: api.BodyDeadline(web.Mount(srv), d.cfg.BodyTimeout), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	// Shutdown does not end open event streams (/v1/alerts/stream); closing
	// the alert manager does.
	alerts := d.alerts
	hs.RegisterOnShutdown(func() { alerts.Close() })
	done := d.goComponent("http server", func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	timeout := d.cfg.ShutdownTimeout
	d.onStop(fmt.Sprintf("draining HTTP requests (timeout %s)", timeout), func() {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			d.log.Warn("HTTP shutdown incomplete", "err", err)
		}
		<-done
	})
}

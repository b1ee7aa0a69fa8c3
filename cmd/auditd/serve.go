package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/buildinfo"
)

func runServe(args []string) error {
	cfg, err := serveConfig(args) // reload.go
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg.reloadFrom = func() (Config, error) { return serveConfig(args) }
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return asConfigError(err)
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

// listenHook sees serve's listener; tests replace it to make it fail.
var listenHook = func(ln net.Listener) net.Listener { return ln }

// serve runs the daemon until ctx ends or a component it depends on stops
// on its own (see instance), then shuts it down in order. If ready is not nil
// it receives the listening address once the server accepts connections.
// It returns the first component's error, if one stopped.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- string) error {
	// The first line says which build this is, before anything can fail.
	in := buildinfo.Read()
	logger.Info("auditd starting", "version", in.Version, "revision", in.Revision, "dirty", in.Dirty, "go", in.GoVersion)
	// The derivations' specs, certificates next, then bind: a bad spec, a
	// bad certificate or a port in use leaves no data dir and no key behind.
	jobs, err := loadDerivations(cfg.Derivations, logger) // derive.go
	if err != nil {
		return asConfigError(err)
	}
	stls, err := serverTLS(cfg, logger) // tls.go
	if err != nil {
		return asConfigError(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	ln = listenHook(ln)
	ln, scheme := tlsListener(ln, stls)
	d := newInstance(ctx, cfg, logger)
	defer d.shutdown()
	d.jobs = jobs
	d.tls = stls
	stopHUP := onSIGHUP(d.reloadOnSignal) // reload.go
	defer stopHUP()
	d.onStop("", func() { ln.Close() })
	if err := d.openLedger(); err != nil {
		return err
	}
	self, err := d.openIdentity() // instanceid.go
	if err != nil {
		return err
	}
	if err := d.startComponents(); err != nil {
		return err
	}
	if err := d.startRetention(); err != nil {
		return err
	}
	if err := d.startDebug(); err != nil {
		return err
	}
	if err := d.startWitnessing(); err != nil { // witness.go
		return err
	}
	srv := api.New(d.store, d.key.vkey, d.opts)
	d.describe(srv, in) // history.go
	for _, c := range srv.Collectors() {
		d.metrics.MustRegister(c)
	}
	if stls != nil {
		for _, c := range stls.Collectors() {
			d.metrics.MustRegister(c)
		}
	}
	d.serveHTTP(api.WithInstance(d.withAdmin(srv), self), ln) // reload.go
	addr := ln.Addr().String()
	logger.Info("auditd serving", "addr", scheme+"://"+addr, "client_certificates", stls != nil && stls.ClientAuth(), "data_dir", cfg.DataDir,
		"logs", len(d.store.Logs()), "verifier_key", d.key.vkey, "writes_protected", cfg.WriteToken != "" || cfg.ReadToken != "", "auth", authSummary(cfg))
	if ready != nil {
		ready <- addr
	}
	<-d.ctx.Done() // a signal, the caller, or a component stopping
	d.shutdown()
	return d.g.Wait()
}

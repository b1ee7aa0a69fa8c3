package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness/submit"
)

// configError is a configuration serve cannot run with: the file, a flag's
// value, a derivation spec, the TLS files. serve exits 2 on it, as on a
// usage error, so that a supervisor can tell "fix the configuration" from
// a daemon that failed at run time (1).
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// asConfigError marks err (if not nil) as a configuration error.
func asConfigError(err error) error {
	if err == nil {
		return nil
	}
	var ce configError
	if errors.As(err, &ce) {
		return err
	}
	return configError{err}
}

// serveConfig reads serve's configuration from its command line: the file
// (--config) and the environment, then the flags over them, validated. It
// returns flag.ErrHelp for -h. A reload calls it again with the same
// arguments.
func serveConfig(args []string) (Config, error) {
	cfg, err := loadConfig(configPath(args))
	if err != nil {
		return cfg, asConfigError(err)
	}
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	fset.String("config", "", "YAML configuration file (flags override it)")
	bindFlags(fset, &cfg)
	kf := bindKafkaFlags(fset)
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "Usage: auditd serve [flags]\n\nRuns the ledger and its HTTP API. With no flags: data in ./auditd-data,\n"+
			"HTTP on 127.0.0.1:8080, a signing key generated on first start. SIGHUP (or\nPOST /-/reload with the write token) reloads the configuration: tokens, TLS\n"+
			"files, derivations (and their spec files' contents), derivation_workers,\nchecks, webhooks, external_url, witness.witnesses and retention apply live;\n"+
			"a change of any other key is refused by name, the running configuration kept.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, usageError{err}
	}
	if fset.NArg() > 0 {
		return cfg, usageError{fmt.Errorf("serve takes no arguments (got %q); flags go before any argument", fset.Args())}
	}
	kf.apply(fset, &cfg)
	if err := cfg.validate(); err != nil {
		return cfg, asConfigError(err)
	}
	return cfg, nil
}

// liveKeys are the configuration keys a reload applies while serve runs.
// A change to any other key is refused, naming it, and nothing is applied.
// The TLS certificate and key files are read again on every reload (their
// paths cannot change). Of the witness: section only witnesses (where
// this auditd's checkpoints go) is live; docs/operations.md lists them.
var liveKeys = map[string]bool{
	"write_token": true, "read_token": true, "write_token_file": true, "read_token_file": true,
	"derivations": true, "derivation_workers": true, "checks": true, "webhooks": true, "external_url": true,
	"retention": true, "witness.witnesses": true,
}

// reloader is serve's configuration reload: on SIGHUP and POST /-/reload.
type reloader struct {
	mu      sync.Mutex // one reload at a time
	applied Config     // the configuration running now
	api     *api.Server
	ok      prometheus.Gauge
	okAt    prometheus.Gauge
}

// withAdmin adds the reload and backup endpoints to srv (POST /-/reload,
// GET /-/backup) and readies the reload: its metrics, the configuration it
// compares the next one with.
func (d *instance) withAdmin(srv *api.Server) http.Handler {
	r := &reloader{applied: d.cfg, api: srv,
		ok: prometheus.NewGauge(prometheus.GaugeOpts{Name: "config_last_reload_successful",
			Help: "Whether the last configuration reload (SIGHUP, POST /-/reload) was applied (1) or refused (0); 1 from the start."}),
		okAt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "config_last_reload_success_timestamp_seconds",
			Help: "Time of the last configuration applied: the start, or the last reload applied."}),
	}
	r.ok.Set(1)
	r.okAt.SetToCurrentTime()
	d.metrics.MustRegister(r.ok, r.okAt)
	d.reload.Store(r)
	return srv.WithAdmin(api.Admin{
		Reload: func(ctx context.Context) (string, error) { return d.reloadConfig("POST /-/reload") },
		Backup: d.writeBackup, // backup.go
	})
}

// reloadOnSignal is SIGHUP's reload; its outcome is logged.
func (d *instance) reloadOnSignal() { _, _ = d.reloadConfig("SIGHUP") }

// reloadConfig reads the configuration again and applies what changed, or
// refuses it whole: the running configuration is kept when the new one
// does not load (the error names the file and line), when a key that
// cannot change live changed, or when the new TLS files do not load.
func (d *instance) reloadConfig(why string) (string, error) {
	r := d.reload.Load()
	if r == nil {
		err := errors.New("serve is still starting: reload again once it serves")
		d.log.Warn("configuration reload refused", "trigger", why, "err", err)
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	summary, err := r.apply(d)
	if err != nil {
		r.ok.Set(0)
		d.log.Error("configuration reload refused: the running configuration is kept", "trigger", why, "err", err)
		return "", err
	}
	r.ok.Set(1)
	r.okAt.SetToCurrentTime()
	d.log.Info("configuration reloaded", "trigger", why, "applied", summary)
	return summary, nil
}

func (r *reloader) apply(d *instance) (string, error) {
	p := d.live
	next, digest := r.applied, p.specDigest
	jobs := p.derivs.current()
	if load := r.applied.reloadFrom; load != nil {
		var err error
		if next, err = load(); err != nil {
			return "", err
		}
		digest = specDigest(next.Derivations)
		// derive.go: specs that do not compile refuse the reload, naming
		// the file, line and column.
		if jobs, err = loadDerivations(next.Derivations, d.log); err != nil {
			return "", err
		}
	}
	changed := configChanges(r.applied, next)
	if digest != p.specDigest && !slices.Contains(changed, "derivations") {
		changed = append(changed, "derivations") // a spec file edited in place
	}
	var refused, live []string
	for _, k := range changed {
		if liveKeys[k] {
			live = append(live, k)
		} else {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		return "", fmt.Errorf("%s changed, which cannot change while serve runs: restart serve to apply %s; nothing was applied (the running configuration is kept)",
			strings.Join(refused, ", "), map[bool]string{true: "it", false: "them"}[len(refused) == 1])
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if slices.Contains(live, k) {
				return true
			}
		}
		return false
	}
	kept := func(err error) error {
		return fmt.Errorf("%w; nothing was applied (the running configuration is kept)", err)
	}

	// First everything that can fail, nothing running replaced yet.
	derivs := has("derivations", "derivation_workers")
	var sinks []alert.Sink
	if has("webhooks", "external_url") {
		var err error
		if sinks, err = webhookSinks(next); err != nil {
			return "", kept(err)
		}
	}
	var sub *submit.Submitter
	var subCols []prometheus.Collector
	if has("witness.witnesses") {
		var err error
		if sub, subCols, err = newSubmitter(d.store, next, d.key, d.log); err != nil {
			return "", kept(err)
		}
	}
	var ret *ledger.Retention
	var retCols []prometheus.Collector
	if has("retention") {
		var err error
		if ret, retCols, err = d.buildRetention(next); err != nil {
			return "", kept(err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || d.stopping.Load() {
		return "", errors.New("serve is shutting down: nothing was applied")
	}
	var done []string
	if d.tls != nil {
		if err := d.tls.Reload(); err != nil { // logged and counted by Reload
			return "", kept(fmt.Errorf("TLS certificate: %w", err))
		}
		done = append(done, "TLS certificate read again")
	}
	// The checks run the invariants of the derivations: new derivations
	// start new checks. The new runner starts before the old one stops.
	var checks *checkers.Runner
	var stopChecks func()
	var checkCols []prometheus.Collector
	if has("checks") || derivs {
		var err error
		if checks, stopChecks, checkCols, err = d.buildChecks(next, jobs); err != nil {
			return "", kept(fmt.Errorf("checks: %w", err))
		}
	}
	if derivs {
		if err := d.startLiveDerivations(p, jobs, next); err != nil {
			stopChecks()
			return "", kept(fmt.Errorf("derivations: %w", err))
		}
		p.specDigest = digest
		done = append(done, fmt.Sprintf("derivations (%s running)", plural.N(len(jobs), "derivation", "derivations")))
	}
	// Nothing fails from here on.
	if checks != nil {
		d.setChecks(p, checks, stopChecks, checkCols)
		done = append(done, "checks restarted")
	}
	if has("webhooks", "external_url") {
		if err := d.alerts.SetSinks(sinks); err != nil { // ErrClosed only: serve is stopping
			d.log.Error("webhooks not replaced", "err", err)
		} else {
			done = append(done, fmt.Sprintf("webhooks (%s)", plural.N(len(sinks), "receiver", "receivers")))
		}
	}
	if has("witness.witnesses") {
		d.setWitnesses(p, sub, subCols)
		done = append(done, fmt.Sprintf("witnesses (%s)", plural.N(len(next.Witness.Witnesses), "witness", "witnesses")))
	}
	if has("retention") {
		d.setRetention(p, ret, retCols, next)
		done = append(done, fmt.Sprintf("retention (%s)", plural.N(len(next.Retention.Logs), "policy", "policies")))
	}
	if tokens := slices.DeleteFunc(slices.Clone(live), func(k string) bool { return !strings.Contains(k, "token") }); len(tokens) > 0 {
		r.api.SetTokens(next.WriteToken, next.ReadToken)
		done = append(done, "tokens ("+strings.Join(tokens, ", ")+")")
	}
	next.reloadFrom = r.applied.reloadFrom
	r.applied = next
	if len(done) == 0 {
		return "no change", nil
	}
	return strings.Join(done, "; "), nil
}

// sameValue compares two values of a configuration key as the file
// gives them: their exported fields, not what serve fills in at run time
// (a section's logger, this instance's identity).
func sameValue(a, b any) bool {
	ya, erra := yaml.Marshal(a)
	yb, errb := yaml.Marshal(b)
	if erra != nil || errb != nil {
		return reflect.DeepEqual(a, b)
	}
	return bytes.Equal(ya, yb)
}

// witnessChanges names the keys of the witness: section that differ
// ("witness.logs", ...).
func witnessChanges(a, b WitnessConfig) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := range t.NumField() {
		if !sameValue(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			out = append(out, "witness."+name)
		}
	}
	return out
}

// configChanges names the top-level keys (their YAML names) whose values
// differ between a and b.
func configChanges(a, b Config) []string {
	// What validate derives from other keys is not compared twice.
	for _, c := range []*Config{&a, &b} {
		c.Checks.jobs, c.Checks.kafka = nil, nil
		c.reloadFrom = nil
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if !sameValue(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if name == "witness" { // named by its keys: only witnesses is live
				out = append(out, witnessChanges(a.Witness, b.Witness)...)
				continue
			}
			out = append(out, name)
		}
	}
	return out
}

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
	"github.com/auditd/auditd/rederive"
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

// apply applies the configuration the reloader reads, or refuses it whole:
// it plans the reload (the keys that changed, each one that can change
// live), builds the new parts, then with serve's parts locked restarts
// what can still fail (TLS, checks, derivations) and replaces the rest.
func (r *reloader) apply(d *instance) (string, error) {
	pl, err := r.plan(d)
	if err != nil {
		return "", err
	}
	// First everything that can fail, nothing running replaced yet.
	parts, err := pl.build(d)
	if err != nil {
		return "", keptConfig(err)
	}
	p := d.live
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || d.stopping.Load() {
		return "", errors.New("serve is shutting down: nothing was applied")
	}
	done, err := pl.restart(d, parts)
	if err != nil {
		return "", err
	}
	// Nothing fails from here on.
	done = append(done, pl.replace(d, r.api, parts)...)
	pl.next.reloadFrom = r.applied.reloadFrom
	r.applied = pl.next
	if len(done) == 0 {
		return "no change", nil
	}
	return strings.Join(done, "; "), nil
}

// keptConfig is the error of a reload refused once planned: nothing of it
// was applied.
func keptConfig(err error) error {
	return fmt.Errorf("%w; nothing was applied (the running configuration is kept)", err)
}

// reloadPlan is what a reload applies: the new configuration, its
// derivations compiled and its spec files' digest, and the keys that
// changed, every one of which can change while serve runs.
type reloadPlan struct {
	next   Config
	digest string
	jobs   []rederive.Job
	live   []string
}

// has reports whether one of keys changed.
func (pl *reloadPlan) has(keys ...string) bool {
	for _, k := range keys {
		if slices.Contains(pl.live, k) {
			return true
		}
	}
	return false
}

// plan reads the configuration again (when the reloader reads one) and
// compiles its derivations, and lists the keys that changed: a key that
// cannot change while serve runs refuses the reload.
func (r *reloader) plan(d *instance) (*reloadPlan, error) {
	p := d.live
	pl := &reloadPlan{next: r.applied, digest: p.specDigest, jobs: p.derivs.current()}
	if load := r.applied.reloadFrom; load != nil {
		var err error
		if pl.next, err = load(); err != nil {
			return nil, err
		}
		pl.digest = specDigest(pl.next.Derivations)
		// derive.go: specs that do not compile refuse the reload, naming
		// the file, line and column.
		if pl.jobs, err = loadDerivations(pl.next.Derivations, d.log); err != nil {
			return nil, err
		}
	}
	changed := configChanges(r.applied, pl.next)
	if pl.digest != p.specDigest && !slices.Contains(changed, "derivations") {
		changed = append(changed, "derivations") // a spec file edited in place
	}
	var refused []string
	for _, k := range changed {
		if liveKeys[k] {
			pl.live = append(pl.live, k)
		} else {
			refused = append(refused, k)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%s changed, which cannot change while serve runs: restart serve to apply %s; nothing was applied (the running configuration is kept)",
			strings.Join(refused, ", "), map[bool]string{true: "it", false: "them"}[len(refused) == 1])
	}
	return pl, nil
}

// reloadParts are the parts a reload builds before it replaces any (each
// nil when its keys did not change).
type reloadParts struct {
	sinks   []alert.Sink
	sub     *submit.Submitter
	subCols []prometheus.Collector
	ret     *ledger.Retention
	retCols []prometheus.Collector
	// The checks, built by restart.
	checks     *checkers.Runner
	stopChecks func()
	checkCols  []prometheus.Collector
}

// build builds the parts of the changed keys that nothing else depends
// on: webhook sinks, the witness submitter, retention.
func (pl *reloadPlan) build(d *instance) (*reloadParts, error) {
	var ps reloadParts
	var err error
	if pl.has("webhooks", "external_url") {
		if ps.sinks, err = webhookSinks(pl.next); err != nil {
			return nil, err
		}
	}
	if pl.has("witness.witnesses") {
		if ps.sub, ps.subCols, err = newSubmitter(d.store, pl.next, d.key, d.log); err != nil {
			return nil, err
		}
	}
	if pl.has("retention") {
		if ps.ret, ps.retCols, err = d.buildRetention(pl.next); err != nil {
			return nil, err
		}
	}
	return &ps, nil
}

// restart, with serve's parts locked, reads the TLS certificate again,
// builds the checks (into ps) and starts the derivations, the steps that
// can still refuse the reload; it returns what it did.
func (pl *reloadPlan) restart(d *instance, ps *reloadParts) ([]string, error) {
	p := d.live
	var done []string
	if d.tls != nil {
		if err := d.tls.Reload(); err != nil { // logged and counted by Reload
			return nil, keptConfig(fmt.Errorf("TLS certificate: %w", err))
		}
		done = append(done, "TLS certificate read again")
	}
	// The checks run the invariants of the derivations: new derivations
	// start new checks. The new runner starts before the old one stops.
	derivs := pl.has("derivations", "derivation_workers")
	if pl.has("checks") || derivs {
		var err error
		if ps.checks, ps.stopChecks, ps.checkCols, err = d.buildChecks(pl.next, pl.jobs); err != nil {
			return nil, keptConfig(fmt.Errorf("checks: %w", err))
		}
	}
	if derivs {
		if err := d.startLiveDerivations(p, pl.jobs, pl.next); err != nil {
			ps.stopChecks()
			return nil, keptConfig(fmt.Errorf("derivations: %w", err))
		}
		p.specDigest = pl.digest
		done = append(done, fmt.Sprintf("derivations (%s running)", plural.N(len(pl.jobs), "derivation", "derivations")))
	}
	return done, nil
}

// replace, with serve's parts locked, puts the parts built in place of
// the running ones and sets the API's tokens; it returns what it did.
func (pl *reloadPlan) replace(d *instance, srv *api.Server, ps *reloadParts) []string {
	p, next := d.live, pl.next
	var done []string
	if ps.checks != nil {
		d.setChecks(p, ps.checks, ps.stopChecks, ps.checkCols)
		done = append(done, "checks restarted")
	}
	if pl.has("webhooks", "external_url") {
		if err := d.alerts.SetSinks(ps.sinks); err != nil { // ErrClosed only: serve is stopping
			d.log.Error("webhooks not replaced", "err", err)
		} else {
			done = append(done, fmt.Sprintf("webhooks (%s)", plural.N(len(ps.sinks), "receiver", "receivers")))
		}
	}
	if pl.has("witness.witnesses") {
		d.setWitnesses(p, ps.sub, ps.subCols)
		done = append(done, fmt.Sprintf("witnesses (%s)", plural.N(len(next.Witness.Witnesses), "witness", "witnesses")))
	}
	if pl.has("retention") {
		d.setRetention(p, ps.ret, ps.retCols, next)
		done = append(done, fmt.Sprintf("retention (%s)", plural.N(len(next.Retention.Logs), "policy", "policies")))
	}
	if tokens := slices.DeleteFunc(slices.Clone(pl.live), func(k string) bool { return !strings.Contains(k, "token") }); len(tokens) > 0 {
		srv.SetTokens(next.WriteToken, next.ReadToken)
		done = append(done, "tokens ("+strings.Join(tokens, ", ")+")")
	}
	return done
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

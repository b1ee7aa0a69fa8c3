package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/keyfile"
	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
	"github.com/auditd/auditd/internal/tlsconf"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

// WitnessConfig is the witness: section (docs/witness.md).
type WitnessConfig struct {
	// Logs are the logs this auditd witnesses (serving POST
	// /add-checkpoint): each origin with the verifier key (a signed-note
	// Ed25519 key) its checkpoints are signed with.
	Logs []WitnessedLog `yaml:"logs"`
	// Witnesses are the witnesses this auditd's logs submit their
	// checkpoints to; GET /v1/logs/{log}/checkpoint serves the
	// cosignatures they return.
	Witnesses []WitnessEndpoint `yaml:"witnesses"`
	// KeyFile is this auditd's cosigning key as a witness (a
	// cosignature/v1 key, separate from the checkpoint key), generated
	// with mode 0600 if it does not exist, its verifier key in
	// KeyFile.pub. Default DataDir/witness.key. Like the checkpoint key it
	// must be a regular file that only its owner can read or write
	// (allow_insecure_key_file), and serve refuses a witness key that is
	// the checkpoint key of this auditd or of a log in Logs.
	KeyFile string `yaml:"key_file"`
	// Name names a generated witness key (the name on its cosignature
	// lines). Default "<checkpoint key name>/witness".
	Name string `yaml:"name"`
}

// WitnessedLog is a log this auditd witnesses.
type WitnessedLog struct {
	Origin      string `yaml:"origin"`
	VerifierKey string `yaml:"verifier_key"`
}

// WitnessEndpoint is a witness of this auditd's logs.
type WitnessEndpoint struct {
	// URL is the witness's base URL (add-checkpoint is URL/add-checkpoint).
	URL string `yaml:"url"`
	// VerifierKey is its cosignature/v1 verifier key.
	VerifierKey string `yaml:"verifier_key"`
	// TLSCAFile, TLSClientCertFile and TLSClientKeyFile configure https
	// to the witness as they do to a peer (PeerConfig, clientTLS).
	TLSCAFile         string `yaml:"tls_ca_file"`
	TLSClientCertFile string `yaml:"tls_client_cert_file"`
	TLSClientKeyFile  string `yaml:"tls_client_key_file"`
	// Logs are the log names or path.Match patterns ("payments.*") whose
	// checkpoints go to this witness; empty (the default) means every log.
	Logs []string `yaml:"logs"`
}

// startWitnessing sets up both witness roles the config asks for, filling
// in the API's options; the submitter stops before the ledger closes. A
// reload replaces the submitter (witness.witnesses, reload_live.go): the
// API follows the one running.
func (d *instance) startWitnessing() error {
	if err := startWitnessServer(d.store, d.cfg, d.key, &d.opts, d.metrics, d.log); err != nil {
		return err
	}
	sub, cols, err := newSubmitter(d.store, d.cfg, d.key, d.log)
	if err != nil {
		return err
	}
	p := d.live
	d.opts.Components.Witnessing.Cosigned = func(log string, cp *ledger.SignedCheckpoint) []byte {
		if s := p.witnesses.Load(); s != nil {
			return s.Cosigned(log, cp)
		}
		return cp.Note
	}
	d.opts.Components.Witnessing.Status = func(log string, size uint64) any {
		if s := p.witnesses.Load(); s != nil {
			return s.Status(log, size)
		}
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d.setWitnesses(p, sub, cols)
	d.onStop("", p.stopPart(d, "stopping the witness submissions", &p.witnessStop))
	return nil
}

// startWitnessServer sets up the add-checkpoint endpoint (witness.logs),
// key being this auditd's checkpoint signing key.
func startWitnessServer(store *ledger.Store, cfg Config, key *signingKey, opts *api.Options, reg prometheus.Registerer, logger *slog.Logger) error {
	wc := cfg.Witness
	if len(wc.Logs) > 0 {
		srv, vkey, err := newWitnessServer(store, cfg, key, logger)
		if err != nil {
			return err
		}
		for _, c := range srv.Collectors() {
			reg.MustRegister(c)
		}
		opts.Components.Witnessing.AddCheckpoint = srv
		logger.Info("witnessing logs", "logs", len(wc.Logs), "witness_verifier_key", vkey)
	}
	return nil
}

// newSubmitter builds the submitter of this auditd's checkpoints to
// cfg's witnesses (nil without witnesses), not running, and its collectors
// to register.
func newSubmitter(store *ledger.Store, cfg Config, key *signingKey, logger *slog.Logger) (*submit.Submitter, []prometheus.Collector, error) {
	wc := cfg.Witness
	if len(wc.Witnesses) == 0 {
		return nil, nil, nil
	}
	var ws []submit.Witness
	for i, w := range wc.Witnesses {
		v, err := witness.NewVerifier(strings.TrimSpace(w.VerifierKey))
		if err != nil {
			return nil, nil, fmt.Errorf("config: witness.witnesses[%d]: %w", i, err)
		}
		if samePublicKey(w.VerifierKey, key.vkey) {
			return nil, nil, fmt.Errorf("config: witness.witnesses[%d]: its verifier key %s is this auditd's checkpoint signing key: "+
				"a witness must be independent of the log it cosigns; name a witness that signs with a key of its own", i, strings.TrimSpace(w.VerifierKey))
		}
		if err := checkWitnessLogs(i, w); err != nil {
			return nil, nil, err
		}
		sw := submit.Witness{URL: w.URL, Verifier: v, Logs: w.Logs}
		tc, err := clientTLS(fmt.Sprintf("witness.witnesses[%d] (%s)", i, redact.URL(w.URL)), w.TLSCAFile, w.TLSClientCertFile, w.TLSClientKeyFile)
		if err != nil {
			return nil, nil, err
		}
		if tc != nil {
			sw.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: tlsconf.Transport(tc), CheckRedirect: redirect.SameOrigin}
		}
		ws = append(ws, sw)
	}
	logs := func() []submit.Log {
		var out []submit.Log
		for _, li := range store.Logs() {
			if l, err := store.Log(li.Name); err == nil {
				out = append(out, l)
			}
		}
		return out
	}
	sub, err := submit.New(logs, ws, submit.Options{Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return sub, sub.Collectors(), nil
}

func newWitnessServer(store *ledger.Store, cfg Config, key *signingKey, logger *slog.Logger) (*server.Server, string, error) {
	wc := cfg.Witness
	var logs []server.Log
	for i, l := range wc.Logs {
		v, err := note.NewVerifier(strings.TrimSpace(l.VerifierKey))
		if err != nil {
			return nil, "", fmt.Errorf("config: witness.logs[%d] (%s): verifier key: %w", i, l.Origin, err)
		}
		logs = append(logs, server.Log{Origin: l.Origin, Verifier: v})
	}
	path, name := wc.KeyFile, wc.Name
	if path == "" {
		path = filepath.Join(cfg.DataDir, "witness.key")
	}
	if name == "" {
		name = key.signer.Name() + "/witness"
	}
	cosigner, err := loadOrCreateWitnessKey(path, name)
	if err != nil {
		return nil, "", err
	}
	if err := checkKeyMode("witness key", path, cfg.AllowInsecureKeyFile, logger); err != nil {
		return nil, "", err
	}
	if err := checkWitnessIndependent(path, cosigner.VerifierKey(), key.vkey, wc.Logs); err != nil {
		return nil, "", err
	}
	b, err := store.Bucket("witness")
	if err != nil {
		return nil, "", err
	}
	srv, err := server.New(b, cosigner, logs, logger)
	if err != nil {
		return nil, "", fmt.Errorf("config: %w", err)
	}
	return srv, cosigner.VerifierKey(), nil
}

// checkWitnessIndependent refuses a witness key (the file path, its
// verifier key wkey) that is the same Ed25519 key, under any name, as this
// auditd's checkpoint signing key (verifier key ckey) or as the checkpoint
// key of a log it witnesses: its cosignature would then vouch for
// checkpoints signed by the same key, which proves nothing a witness is
// for.
func checkWitnessIndependent(path, wkey, ckey string, logs []WitnessedLog) error {
	const why = "a witness must be independent of the log it cosigns; point witness.key_file at a key of its own (a missing file is generated)"
	if samePublicKey(wkey, ckey) {
		return fmt.Errorf("config: witness key %s is this auditd's checkpoint signing key (%s): %s", path, ckey, why)
	}
	for i, l := range logs {
		if samePublicKey(wkey, l.VerifierKey) {
			return fmt.Errorf("config: witness key %s is the checkpoint signing key of witness.logs[%d] (%s), the log it would cosign: %s", path, i, l.Origin, why)
		}
	}
	return nil
}

// samePublicKey reports whether two signed-note verifier keys
// ("<name>+<hash>+<base64(type || public key)>", of either type: a
// checkpoint key 0x01, a cosignature/v1 key 0x04) hold the same Ed25519
// public key, whatever their names and types.
func samePublicKey(a, b string) bool {
	pa, pb := ed25519Public(a), ed25519Public(b)
	return pa != nil && bytes.Equal(pa, pb)
}

// ed25519Public is the Ed25519 public key of a signed-note verifier key,
// nil if it holds none.
func ed25519Public(vkey string) []byte {
	parts := strings.SplitN(strings.TrimSpace(vkey), "+", 3) // base64 has + too
	if len(parts) != 3 {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize {
		return nil
	}
	return raw[1:]
}

// loadOrCreateWitnessKey reads the cosigning key at path, a small regular
// file (keyfile.Read), or creates it (mode 0600, the verifier key in
// path+".pub"). checkKeyMode checks who else may read it.
func loadOrCreateWitnessKey(path, name string) (*witness.Cosigner, error) {
	b, _, err := keyfile.Read("witness key file", path)
	if errors.Is(err, fs.ErrNotExist) {
		skey, vkey, gerr := witness.GenerateKey(rand.Reader, name)
		if gerr != nil {
			return nil, gerr
		}
		if err := writeKeyFiles(path, skey, vkey); err != nil {
			return nil, fmt.Errorf("witness key: %w", err)
		}
		b, err = []byte(skey), nil
	}
	if err != nil {
		return nil, err
	}
	k, err := witness.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("witness key %s: %w", path, err)
	}
	return k, nil
}

// witnessPolicyFlags are the witness policy flags of prove and verify.
type witnessPolicyFlags struct {
	keys      []string
	threshold int
}

func bindWitnessPolicyFlags(fs *flag.FlagSet, f *witnessPolicyFlags) {
	fs.Func("witness-key", "cosignature/v1 verifier key of a witness the checkpoint must be cosigned by (repeatable; @FILE reads it from a file)", func(s string) error {
		if strings.HasPrefix(s, "@") {
			b, _, err := keyfile.Read("witness verifier key file", s[1:])
			if err != nil {
				return err
			}
			s = strings.TrimSpace(string(b))
		}
		f.keys = append(f.keys, s)
		return nil
	})
	fs.IntVar(&f.threshold, "witness-threshold", 0, "how many of the --witness-key witnesses must have cosigned (default: all)")
}

// options returns the client option of the policy, if any was given.
func (f *witnessPolicyFlags) options() ([]client.Option, error) {
	if len(f.keys) == 0 {
		if f.threshold != 0 {
			return nil, errors.New("--witness-threshold needs --witness-key")
		}
		return nil, nil
	}
	p, err := witness.NewPolicy(f.threshold, f.keys...)
	if err != nil {
		return nil, err
	}
	return []client.Option{client.WithWitnessPolicy(p)}, nil
}

// checkWitnessLogs checks witness i's logs selector: log names or
// path.Match patterns.
func checkWitnessLogs(i int, w WitnessEndpoint) error {
	for _, p := range w.Logs {
		if _, err := path.Match(p, ""); p == "" || err != nil {
			return fmt.Errorf("config: witness.witnesses[%d].logs: %q: want a log name or a pattern such as \"payments.*\"", i, p)
		}
	}
	return nil
}

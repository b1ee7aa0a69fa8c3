package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/keyfile"
	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/internal/tlsconf"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/witness"
)

const checkConfigUsage = `Usage: auditd check-config --config FILE [--derivations FILE]...

Checks everything serve would load, without opening the ledger, binding a
port or connecting to a store: the configuration file, the derivation spec
files (YAML and CEL), the derived stores' DSNs and URLs (syntax only), the
signing and witness keys (small regular files only their owner can read),
the TLS certificate, key and client CAs, the Kafka source's TLS files, the
token files, and the witnesses' and peers' verifier keys. Exits 0 and
prints one line when all is valid, 2 with one line per problem
(file:line:col where known) if not.

`

// runCheckConfig is `auditd check-config`.
func runCheckConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file serve would run with (required)")
	var extra []string
	fs.Func("derivations", "a derivation spec file serve would get with --derivations (repeatable)", func(v string) error {
		extra = append(extra, v)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprint(stderr, checkConfigUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "auditd check-config: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "auditd check-config: --config FILE is required")
		return 2
	}
	summary, warnings, problems := checkConfig(*path, extra)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		fmt.Fprintf(stderr, "auditd check-config: %s is not valid: %s\n", *path, plural.N(len(problems), "problem", "problems"))
		return 2
	}
	fmt.Fprintf(stdout, "%s is valid: %s\n", *path, summary)
	return 0
}

// checkConfig loads what serve loads from the file at path (and the extra
// derivation files) and returns a summary of it, or every problem found,
// and what serve would warn about. It reads files only: no ledger, no
// listener, no connection.
func checkConfig(path string, extraDerivations []string) (summary string, warnings, problems []string) {
	add := func(err error) {
		for _, line := range strings.Split(err.Error(), "\n") {
			if line != "" {
				problems = append(problems, line)
			}
		}
	}
	cfg, err := loadConfig(path)
	if err != nil {
		add(err)
		return "", nil, problems // nothing further is known
	}
	cfg.Derivations = append(cfg.Derivations, extraDerivations...)
	if err := cfg.validate(); err != nil {
		add(err)
	}
	if cfg.KeyFile == "" {
		cfg.KeyFile = filepath.Join(cfg.DataDir, "auditd.key")
	}
	if _, err := newLogger(cfg.LogLevel, cfg.LogFormat); err != nil {
		add(fmt.Errorf("config: %w", err))
	}
	if _, err := checkpointGuardDir(cfg.CheckpointGuardDir); err != nil {
		add(fmt.Errorf("config: checkpoint_guard_dir: %w", err))
	}

	// The signing key: serve generates a missing one.
	keyState := "to be generated"
	var checkpointVKey string
	switch k, err := checkPrivateKeyFile("signing key", cfg.KeyFile, cfg.AllowInsecureKeyFile, &warnings, func(b string) (string, error) {
		k, err := parseKey(b)
		if err != nil {
			return "", err
		}
		return k.vkey, nil
	}); {
	case err != nil:
		add(err)
	case k != "":
		keyState, checkpointVKey = "present", k
	}

	// Derivations: YAML, CEL, and each store's settings (no I/O).
	nDeriv := 0
	if len(cfg.Derivations) > 0 {
		jobs, ws, err := loadJobs(cfg.Derivations...)
		if err != nil {
			add(err)
		}
		for _, w := range ws {
			warnings = append(warnings, w.String())
		}
		for _, j := range jobs {
			s := j.Spec
			st, err := store.Open(context.Background(), s.Store)
			if err != nil {
				add(fmt.Errorf("%s:%d: derivation %q: store: %w", s.File, s.Line, s.Name, err))
				continue
			}
			st.Close()
			nDeriv++
		}
	}

	// TLS: the API's certificate, key and client CAs, loaded as serve does.
	tlsState := "off"
	if cfg.TLSCertFile != "" && cfg.TLSKeyFile != "" {
		s, err := tlsconf.NewServer(tlsconf.ServerFiles{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
			ClientCAFile: cfg.TLSClientCAFile}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			add(fmt.Errorf("config: %w", err))
		} else {
			tlsState = "on"
			if s.ClientAuth() {
				tlsState = "on, client certificates required"
			}
		}
	}

	// The Kafka source's TLS files, as its client would load them (no dial).
	if cfg.Kafka != nil {
		if _, err := cfg.Kafka.ClientOpts(slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			add(fmt.Errorf("config: kafka: %w", err))
		}
	}

	// Witnessing, both ways.
	wc := cfg.Witness
	for i, l := range wc.Logs {
		if _, err := note.NewVerifier(strings.TrimSpace(l.VerifierKey)); err != nil {
			add(fmt.Errorf("config: witness.logs[%d] (%s): verifier key: %w", i, l.Origin, err))
		}
	}
	if len(wc.Logs) > 0 {
		wpath := wc.KeyFile
		if wpath == "" {
			wpath = filepath.Join(cfg.DataDir, "witness.key")
		}
		wkey, err := checkPrivateKeyFile("witness key", wpath, cfg.AllowInsecureKeyFile, &warnings, func(b string) (string, error) {
			k, err := witness.ParseKey(b)
			if err != nil {
				return "", err
			}
			return k.VerifierKey(), nil
		})
		if err != nil {
			add(err)
		} else if wkey != "" {
			if err := checkWitnessIndependent(wpath, wkey, checkpointVKey, wc.Logs); err != nil && checkpointVKey != "" {
				add(err)
			}
		}
	}
	for i, w := range wc.Witnesses {
		if _, err := witness.NewVerifier(strings.TrimSpace(w.VerifierKey)); err != nil {
			add(fmt.Errorf("config: witness.witnesses[%d]: verifier key: %w", i, err))
		}
		if err := checkWitnessLogs(i, w); err != nil {
			add(err)
		}
		if _, err := clientTLS(fmt.Sprintf("witness.witnesses[%d]", i), w.TLSCAFile, w.TLSClientCertFile, w.TLSClientKeyFile); err != nil {
			add(err)
		}
	}

	summary = fmt.Sprintf("data dir %s, signing key %s (%s), %s, TLS %s, %s witnessed, %s, %s",
		cfg.DataDir, cfg.KeyFile, keyState, plural.N(nDeriv, "derivation", "derivations"), tlsState,
		plural.N(len(wc.Logs), "log", "logs"), plural.N(len(wc.Witnesses), "witness", "witnesses"),
		plural.N(len(cfg.Checks.Peers.List), "peer", "peers"))
	return summary, warnings, problems
}

// checkPrivateKeyFile checks a private key file as serve reads it: a small
// regular file that only its owner can read or write (unless allowed), in a
// form parse accepts; parse returns its verifier key. A missing file is no
// problem (serve generates it) and returns "". An insecure mode that
// allowInsecure lets through is added to warnings.
func checkPrivateKeyFile(what, path string, allowInsecure bool, warnings *[]string, parse func(string) (string, error)) (vkey string, err error) {
	b, mode, err := keyfile.Read(what+" file", path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if err := checkKeyMode(what, path, allowInsecure, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return "", err
	}
	if err := keyfile.CheckPrivate(what+" file", path, mode.Perm()); err != nil {
		*warnings = append(*warnings, fmt.Sprintf("%v (allowed by allow_insecure_key_file: serve starts, logging an error)", err))
	}
	vkey, err = parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	return vkey, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/mod/sumdb/note"
)

const benchDeriveUsage = `Usage: auditd-bench derive [flags]

Measures a derivation check end to end: a sum of amounts by account, in
CEL, folded over a ledger log of JSON payment events and compared with a
PostgreSQL table of the balances.

The load phase (timed, outside the targets) appends -events events of
about 200 bytes to the log "payments" of a ledger in -data-dir, waits for
the checkpoint that covers them, and writes the expected balance of each
account to the table bench_balances. The verify phase runs the derivation
check (rederive.Runner.Run, a full fold and the comparison) and reports its
time, fold events/s, compare rows/s, the state (it must be clean) and the
peak resident set, against the targets. With -split it then times Fold and
Compare apart, and the parts under them (reading the log, preparing events,
scanning the table), to show where the time goes.

The peak resident set is VmHWM, reset before the verify phase where Linux
allows it (/proc/self/clear_refs). To keep the load phase out of it in any
case, load once and verify in a fresh process:

  auditd-bench derive -phase load -data-dir /tmp/derive
  auditd-bench derive -phase verify -data-dir /tmp/derive

Events are a pure function of -seed and their index, so a data directory
is reused (with -reuse, or -phase verify) only when its manifest records
the same -events, -keys and -seed.

`

const (
	deriveLog      = "payments"
	deriveTable    = "bench_balances"
	deriveManifest = "bench-derive.json"
	deriveEventLen = 200 // bytes of each event's JSON payload
)

// Targets of the issue, checked on the summary.
const (
	deriveTargetSeconds    = 60.0
	deriveTargetFoldRate   = 600_000.0 // issue 13, target 4
	deriveTargetCompRate   = 500_000.0
	deriveTargetPeakRSS    = 2 << 30
	deriveTargetEventCount = 10_000_000
)

// deriveSpec is the derivation checked. %s is the DSN as a YAML (JSON)
// string.
const deriveSpec = `derivations:
  - name: bench_balances
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + event.amount
    grace: 0s
    confirm_runs: 1
    error_budget: 0
    store:
      postgres:
        dsn: %s
        query: SELECT account, balance FROM bench_balances
`

type benchDeriveFlags struct {
	events     int
	keys       int
	seed       uint64
	dir        string
	keep       bool
	reuse      bool
	pg         string
	workers    int
	producers  int
	batch      int
	phase      string
	split      bool
	cpuProfile string
	memProfile string
	jsonOut    string
	set        map[string]bool // flags given on the command line
}

// deriveManifestFile records a completed load in its data directory.
type deriveManifestFile struct {
	Events int    `json:"events"`
	Keys   int    `json:"keys"`
	Seed   uint64 `json:"seed"`
	// Accounts is the number of accounts with at least one event: the
	// rows of the table. Total is the sum of every amount.
	Accounts int   `json:"accounts"`
	Total    int64 `json:"total"`
	// NoteKey and VerifierKey are the keys of the ledger's checkpoints.
	NoteKey     string `json:"note_key"`
	VerifierKey string `json:"verifier_key"`
}

func runDerive(args []string) error {
	f := benchDeriveFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("derive", flag.ContinueOnError)
	fs.IntVar(&f.events, "events", deriveTargetEventCount, "events in the log")
	fs.IntVar(&f.keys, "keys", 1_000_000, "accounts the events are spread over")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the events' accounts, amounts and memos")
	fs.StringVar(&f.dir, "data-dir", "", "ledger data directory (default: a temporary one, removed after unless -keep)")
	fs.BoolVar(&f.keep, "keep", false, "keep the temporary data directory")
	fs.BoolVar(&f.reuse, "reuse", false, "reuse the load of -data-dir (and the table) when it matches, instead of loading")
	fs.StringVar(&f.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN of the derived store")
	fs.IntVar(&f.workers, "workers", 0, "Runner workers (0: GOMAXPROCS)")
	fs.IntVar(&f.producers, "producers", 4, "load: concurrent appenders")
	fs.IntVar(&f.batch, "batch", 1000, "load: events per append")
	fs.StringVar(&f.phase, "phase", "all", "load, verify or all")
	fs.BoolVar(&f.split, "split", true, "verify: after the end-to-end run, time Fold, Compare and their parts apart")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the end-to-end run to this file")
	fs.StringVar(&f.memProfile, "memprofile", "", "write a heap profile to this file: with -split when the folded states and the expected values are live (the peak), else after the run")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchDeriveUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return done(err)
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("derive: unexpected argument %q", fs.Arg(0))
	case f.phase != "load" && f.phase != "verify" && f.phase != "all":
		return fmt.Errorf("derive: -phase %q: want load, verify or all", f.phase)
	case f.events < 1 || f.keys < 1 || f.producers < 1 || f.batch < 1 || f.workers < 0:
		return errors.New("derive: -events, -keys, -producers and -batch must be positive, -workers not negative")
	case f.phase == "verify" && f.dir == "":
		return errors.New("derive: -phase verify needs the -data-dir of a load")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir := f.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "auditd-bench-derive-")
		if err != nil {
			return err
		}
		dir = d
		if f.keep || f.phase == "load" {
			fmt.Printf("derive: data in %s (kept)\n", dir)
		} else {
			defer os.RemoveAll(dir)
		}
	}
	res := map[string]any{"mode": "derive", "cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	st, m, err := deriveSetup(ctx, dir, &f, res)
	if err != nil {
		return err
	}
	defer st.Close()
	if f.phase != "load" {
		if err := deriveVerify(ctx, st, f, m, res); err != nil {
			return err
		}
	} else {
		fmt.Printf("derive: loaded; verify with: auditd-bench derive -phase verify -data-dir %s\n", dir)
	}
	return writeJSON(f.jsonOut, "derive", res)
}

func readDeriveManifest(dir string) (*deriveManifestFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, deriveManifest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m deriveManifestFile
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("derive: %s: %w", deriveManifest, err)
	}
	return &m, nil
}

func deriveKeys(m *deriveManifestFile) (note.Signer, note.Verifier, error) {
	signer, err := note.NewSigner(m.NoteKey)
	if err != nil {
		return nil, nil, fmt.Errorf("derive: manifest note key: %w", err)
	}
	verifier, err := note.NewVerifier(m.VerifierKey)
	if err != nil {
		return nil, nil, fmt.Errorf("derive: manifest verifier key: %w", err)
	}
	return signer, verifier, nil
}

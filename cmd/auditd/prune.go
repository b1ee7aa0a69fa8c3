package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

const pruneUsage = `Usage: auditd prune --data-dir DIR --log NAME --before INDEX|TIME|AGE [flags]

Deletes the payloads of a stopped daemon's log below an entry index, or of
its entries older than a time (RFC 3339) or an age ("720h"), keeping every
entry's leaf, the tiles, the indexes and the signed checkpoints: every
inclusion and consistency proof still verifies and every leaf still
recomputes from the entry's fields and its payload's SHA-256. Pruning
removes a prefix of the log, never goes past its latest signed checkpoint,
and compacts the pruned range so the disk space is reclaimed; an index
past the end of the log is refused. It is idempotent: after an
interruption, run it again. A derivation that reads the log can no longer
fold the pruned range unless it starts from a snapshot of its state:
serve's retention policy (retention: in its config) snapshots such a
derivation before it prunes its source (docs/derivations.md, "Snapshots"),
but this command makes no snapshot, so with --config (serve's config
file) it refuses to prune a log one of its derivations reads; the file
also gives the defaults of --data-dir, --key-file and --checkpoint-dir.

The daemon must not be running on DIR: the ledger's lock refuses it.

`

type pruneFlags struct {
	dataDir, log, before, keyFile, cpDir string
	config                               string
	dryRun                               bool
	batch                                int
	rate                                 float64
}

func runPrune(args []string, stdout, stderr io.Writer) int {
	var f pruneFlags
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "", "the daemon's data directory (required; the daemon must not be running on it)")
	fs.StringVar(&f.log, "log", "", "the log whose payloads to prune (required)")
	fs.StringVar(&f.before, "before", "", "prune below this entry index, or the entries older than this RFC 3339 time or this age (720h) (required)")
	fs.StringVar(&f.keyFile, "key-file", "", "the checkpoint signing key (default DATA-DIR/auditd.key; read, never created)")
	fs.StringVar(&f.cpDir, "checkpoint-dir", "", "the daemon's checkpoint_dir, if it sets one")
	fs.StringVar(&f.config, "config", "", "serve's YAML config: refuse a log its derivations read; defaults for the data dir, key and checkpoint dir")
	fs.BoolVar(&f.dryRun, "dry-run", false, "say what would be pruned and write nothing")
	fs.IntVar(&f.batch, "batch", 4096, "entries rewritten per batch")
	fs.Float64Var(&f.rate, "rate", 0, "at most this many entries per second (0: no bound)")
	fs.Usage = func() {
		fmt.Fprint(stderr, pruneUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := f.fromConfig(); err != nil {
		fmt.Fprintln(stderr, "auditd prune:", err)
		return 1
	}
	if f.dataDir == "" || f.log == "" || f.before == "" || fs.NArg() > 0 {
		fs.Usage()
		fmt.Fprintln(stderr, "auditd prune: --data-dir, --log and --before are required and there are no arguments")
		return 2
	}
	o, err := parseBefore(f.before, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "auditd prune: --before %q: %v\n", f.before, err)
		return 2
	}
	o.DryRun, o.BatchSize, o.Rate = f.dryRun, f.batch, f.rate
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := prune(ctx, f, o, stdout); err != nil {
		fmt.Fprintln(stderr, "auditd prune:", err)
		return exitStatus(err) // main.go: 2 for a --before past the end
	}
	return 0
}

// fromConfig applies --config: the flags' defaults from serve's config,
// and a refusal if a derivation it lists reads the log.
func (f *pruneFlags) fromConfig() error {
	if f.config == "" {
		return nil
	}
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	if f.dataDir == "" {
		f.dataDir = cfg.DataDir
	}
	if f.keyFile == "" {
		f.keyFile = cfg.KeyFile
	}
	if f.cpDir == "" {
		f.cpDir = cfg.CheckpointDir
	}
	if len(cfg.Derivations) == 0 || f.log == "" {
		return nil
	}
	jobs, _, err := loadJobs(cfg.Derivations...)
	if err != nil {
		return err
	}
	if err := derivationGuard(rederive.Specs(jobs))(f.log); err != nil {
		return fmt.Errorf("%w: its folds would fail on the pruned range, and this command makes no snapshot of its state; prune it with serve's retention policy (retention: in the config), which snapshots the derivation first (docs/derivations.md, \"Snapshots\")", err)
	}
	return nil
}

// parseBefore reads --before: an entry index, an RFC 3339 time, or an age
// counted back from now.
func parseBefore(s string, now time.Time) (ledger.PruneOptions, error) {
	if i, err := strconv.ParseUint(s, 10, 64); err == nil {
		return ledger.PruneOptions{Before: i}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return ledger.PruneOptions{OlderThan: t}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return ledger.PruneOptions{OlderThan: now.Add(-d)}, nil
	}
	return ledger.PruneOptions{}, errors.New("want an entry index, an RFC 3339 time or a positive age such as 720h")
}

// openStopped opens a stopped daemon's ledger in dataDir for an offline
// command that writes to it (prune, repair-index): with its signing key
// (keyFile, default DATA-DIR/auditd.key; read, never created) and its
// checkpoint dir, warnings and errors logged to logw. A data dir without a
// ledger, or one a daemon holds, is an error that says so.
func openStopped(dataDir, keyFile, cpDir string, logw io.Writer) (*ledger.Store, error) {
	if m, _ := filepath.Glob(filepath.Join(dataDir, "MANIFEST-*")); len(m) == 0 {
		return nil, fmt.Errorf("no ledger in %s (no Pebble MANIFEST)", dataDir)
	}
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "auditd.key")
	}
	b, _, err := readKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", keyFile, err)
	}
	st, err := ledger.Open(dataDir, key.signer, key.verifier, ledger.WithCheckpointDir(cpDir),
		ledger.WithLogger(slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return nil, explainLock(dataDir, err)
	}
	return st, nil
}

func prune(ctx context.Context, f pruneFlags, o ledger.PruneOptions, stdout io.Writer) error {
	st, err := openStopped(f.dataDir, f.keyFile, f.cpDir, os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	l, err := st.Log(f.log)
	if err != nil {
		return fmt.Errorf("no log %q in %s", f.log, f.dataDir)
	}
	if size := l.Size(); o.OlderThan.IsZero() && o.Before > size {
		// Likely a typo or the wrong log: say so rather than prune the
		// whole log up to its checkpoint.
		return usageError{fmt.Errorf("--before %d is past the end of log %s, which has %d entries (indexes 0 to %d); nothing pruned", o.Before, f.log, size, int64(size)-1)}
	}
	before, err := st.DiskUsage()
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := l.PrunePayloads(ctx, o)
	took := time.Since(start)
	verb := "pruned"
	if o.DryRun {
		verb = "would prune"
	}
	fmt.Fprintf(stdout, "%s: %s the payloads of %d entries (%d bytes): watermark %d -> %d (latest signed checkpoint %d) in %.1fs (%.0f entries/s)\n",
		f.log, verb, res.Pruned, res.PayloadBytes, res.From, res.To, res.Limit, took.Seconds(), float64(res.To-res.From)/max(took.Seconds(), 1e-9))
	if err != nil {
		return fmt.Errorf("%s: %w (pruning is idempotent: run it again to resume from watermark %d)", f.log, err, res.To)
	}
	if after, err := st.DiskUsage(); err == nil && !o.DryRun {
		fmt.Fprintf(stdout, "%s: ledger disk use %d -> %d bytes\n", f.log, before.Total, after.Total)
	}
	return st.Close()
}

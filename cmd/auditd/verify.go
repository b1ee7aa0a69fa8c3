package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// Exit codes of auditd verify.
const (
	exitClean        = 0
	exitDrift        = 1
	exitError        = 2
	exitVerification = 3
)

// verifyFlags are auditd verify's flags.
type verifyFlags struct {
	config, dataDir, server, vkey, vkeyFile, token, only string
	jsonOut, junitOut, mdOut, cacheDir                   string
	workers                                              int
	timeout                                              time.Duration
	quiet, fromSnapshot                                  bool
	wp                                                   witnessPolicyFlags // witness.go
	tls                                                  clientTLSFlags     // tls.go; with --server only
}

const verifyUsage = `Usage: auditd verify --config FILE (--data-dir DIR | --server URL --verifier-key KEY) [flags]

Runs each configured derivation once over the ledger, compares the result
with its derived store, and reports drift with the ledger entries and
inclusion proofs behind each wrong value. Against --server it verifies the
checkpoints' signatures with --verifier-key and every entry it folds against
them, trusting nothing it did not check.

Exit status:
  0  clean (pending mismatches, younger than the grace period, do not fail)
  1  confirmed drift
  2  configuration or runtime error (bad spec, store unreachable, ...)
  3  ledger verification failure (a signature, leaf or proof did not check)

`

// parseVerifyFlags parses args; help is true after -h. A flag the flag
// package refused (and printed) is a usageError.
func parseVerifyFlags(args []string, stderr io.Writer) (f verifyFlags, help bool, err error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "derivation spec file (YAML with a derivations list), or the daemon's config file (the spec files its derivations name); required")
	fs.StringVar(&f.dataDir, "data-dir", "", "verify against the ledger in this data dir (the daemon must not be running on it)")
	fs.StringVar(&f.server, "server", "", "verify against a remote auditd at this URL (or host:port for http://host:port)")
	fs.StringVar(&f.vkey, "verifier-key", "", "checkpoint verifier key of the remote auditd (NAME+HASH+KEY), or @FILE")
	fs.StringVar(&f.vkeyFile, "verifier-key-file", "", "file holding the verifier key (same as --verifier-key @FILE)")
	fs.StringVar(&f.token, "token", os.Getenv("AUDITD_READ_TOKEN"), "bearer token if the server protects reads")
	fs.StringVar(&f.only, "only", "", "run only these derivations (comma-separated names)")
	fs.StringVar(&f.jsonOut, "json", "", "write the reports as JSON to this file")
	fs.StringVar(&f.junitOut, "junit", "", "write a JUnit XML report to this file")
	fs.StringVar(&f.mdOut, "markdown", "", "write a Markdown summary (for a pull-request comment) to this file")
	fs.IntVar(&f.workers, "workers", 0, "fold workers (default: the number of CPUs)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Minute, "overall time limit")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar and no logs on stderr")
	fs.BoolVar(&f.fromSnapshot, "from-snapshot", false, "with --server: start each derivation from the snapshot the server publishes, checked against --verifier-key (docs/derivations.md, \"Snapshots\")")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "with --server: keep the bundles read in this directory, and read them from it on later runs once proven against the new checkpoint (docs/ci.md)")
	bindWitnessPolicyFlags(fs, &f.wp) // witness.go; with --server only
	bindClientTLSFlags(fs, &f.tls)    // tls.go; with --server only
	fs.Usage = func() {
		fmt.Fprint(stderr, verifyUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, errors.Is(err, flag.ErrHelp), usageError{err}
	}
	if f.config == "" {
		return f, false, errors.New("--config is required")
	}
	if (f.dataDir == "") == (f.server == "") {
		return f, false, errors.New("give exactly one of --data-dir and --server")
	}
	if f.fromSnapshot && f.server == "" {
		return f, false, errors.New("--from-snapshot needs --server")
	}
	if f.cacheDir != "" && f.server == "" {
		return f, false, errors.New("--cache-dir needs --server")
	}
	if !f.tls.files.IsZero() && f.server == "" {
		return f, false, errors.New("--ca-file, --tls-client-cert and --tls-client-key need --server")
	}
	return f, false, nil
}

func runVerify(args []string, stdout, stderr io.Writer) int {
	f, help, err := parseVerifyFlags(args, stderr)
	if help {
		return exitClean
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd verify: "+format+"\n", a...)
		return code
	}
	var printed usageError
	if errors.As(err, &printed) {
		return exitError
	}
	if err != nil {
		return fail(exitError, "%v", err)
	}
	jobs, err := verifyJobs(f.config, f.only)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	logger := slog.New(slog.DiscardHandler)
	if !f.quiet {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	lg, closeLedger, err := verifyLedger(f, logger)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	defer closeLedger()
	bar := newProgressBar(stderr, !f.quiet && isTerminal(stderr))
	runner := rederive.NewRunner(lg, rederive.WithWorkers(f.workers), rederive.WithLogger(logger), rederive.WithNoMatchIsError(),
		rederive.WithProgress(bar.update))
	var reports []*rederive.Report
	for _, j := range jobs {
		jr := runner
		if f.fromSnapshot {
			if jr, err = snapshotRunner(ctx, f, lg, j, logger, bar.update); err != nil {
				return fail(exitError, "%s: %v", j.Derivation.Name(), explainTLS(err))
			}
		}
		rep, err := jr.Run(ctx, j, true)
		bar.done()
		if err != nil {
			return fail(exitError, "%s: %v", j.Derivation.Name(), explainTLS(err))
		}
		reports = append(reports, rep)
	}
	if err := rederive.WriteTable(stdout, reports); err != nil {
		return fail(exitError, "%v", err)
	}
	if err := writeVerifyReports(f, reports); err != nil {
		return fail(exitError, "writing a report: %v", err)
	}
	return exitCode(reports)
}

// verifyJobs compiles the derivations of the spec file config, only those
// named in only (comma-separated) if it is not empty.
func verifyJobs(config, only string) ([]rederive.Job, error) {
	files, err := verifySpecFiles(config)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	all, warnings, err := loadJobs(files...)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "auditd verify: warning: %s\n", w)
	}
	var jobs []rederive.Job
	found := map[string]bool{}
	for _, j := range all {
		if len(want) > 0 && !want[j.Spec.Name] {
			continue
		}
		found[j.Spec.Name] = true
		jobs = append(jobs, j)
	}
	for n := range want {
		if !found[n] {
			return nil, fmt.Errorf("--only: no derivation %q in %s", n, config)
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s declares no derivations", config)
	}
	return jobs, nil
}

// verifyLedger is the ledger verify reads: the remote server's, checked
// against the verifier key, or the data dir's.
func verifyLedger(f verifyFlags, logger *slog.Logger) (rederive.Ledger, func(), error) {
	wopts, err := f.wp.options()
	if err == nil && f.server == "" && len(wopts) > 0 {
		err = errors.New("--witness-key needs --server: a data dir holds no cosignatures")
	}
	if err != nil {
		return nil, nil, err
	}
	if f.server == "" {
		store, err := openLedgerForVerify(f.dataDir, logger)
		if err != nil {
			return nil, nil, err
		}
		return rederive.LocalLedger{Store: store}, func() { store.Close() }, nil
	}
	key, err := verifierKeyArg(f.vkey, f.vkeyFile)
	if err != nil {
		return nil, nil, err
	}
	if key == "" {
		return nil, nil, errors.New("--verifier-key is required with --server: the key must come from a source you trust, not from the server")
	}
	v, err := note.NewVerifier(key)
	if err != nil {
		return nil, nil, fmt.Errorf("verifier key: %w", err)
	}
	base, err := serverURL(f.server, f.tls) // serverurl.go
	if err != nil {
		return nil, nil, err
	}
	tc, err := f.tls.config()
	if err != nil {
		return nil, nil, err
	}
	rl := &rederive.RemoteLedger{Client: client.New(base, v, append(wopts, client.WithTLSConfig(tc), client.WithToken(f.token))...)}
	if f.cacheDir != "" {
		if rl.Cache, err = client.OpenBundleCache(f.cacheDir); err != nil {
			return nil, nil, err
		}
	}
	return rl, func() {}, nil
}

// writeVerifyReports writes the JSON, JUnit and Markdown reports asked for.
func writeVerifyReports(f verifyFlags, reports []*rederive.Report) error {
	write := func(path string, fn func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(out); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return errors.Join(
		write(f.jsonOut, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"reports": reports, "exit_code": exitCode(reports)})
		}),
		write(f.junitOut, func(w io.Writer) error { return rederive.WriteJUnit(w, reports) }),
		write(f.mdOut, func(w io.Writer) error { return rederive.WriteMarkdown(w, reports) }),
	)
}

// exitCode is the most serious outcome of the reports: a verification
// failure, then an error, then confirmed drift.
func exitCode(reports []*rederive.Report) int {
	code := exitClean
	for _, r := range reports {
		switch {
		case r.State == rederive.StateError && r.ErrorKind == rederive.ErrKindVerification:
			return exitVerification
		case r.State == rederive.StateError:
			code = exitError
		case r.State == rederive.StateDrift && code == exitClean:
			code = exitDrift
		}
	}
	return code
}

// openLedgerForVerify opens a data dir's ledger with the key the daemon
// generated there, for reading.
func openLedgerForVerify(dir string, logger *slog.Logger) (*ledger.Store, error) {
	keyFile := filepath.Join(dir, "auditd.key")
	b, _, err := readKeyFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w (verify reads the daemon's key to open its ledger)", dir, err)
	}
	k, err := parseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", keyFile, err)
	}
	store, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("open the ledger in %s: %w (is the daemon running on it? then use --server)", dir, err)
	}
	return store, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws fold progress on a terminal.
type progressBar struct {
	w    io.Writer
	on   bool
	mu   sync.Mutex
	last string
}

func newProgressBar(w io.Writer, on bool) *progressBar { return &progressBar{w: w, on: on} }

func (p *progressBar) update(name string, done, total uint64) {
	if !p.on || total == 0 {
		return
	}
	const width = 30
	n := int(done * width / total)
	line := fmt.Sprintf("\r%-20s [%s%s] %5.1f%% %d/%d entries", name, strings.Repeat("=", n), strings.Repeat(" ", width-n),
		100*float64(done)/float64(total), done, total)
	p.mu.Lock()
	defer p.mu.Unlock()
	if line != p.last {
		fmt.Fprint(p.w, line)
		p.last = line
	}
}

func (p *progressBar) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on && p.last != "" {
		fmt.Fprint(p.w, "\n")
		p.last = ""
	}
}

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

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/keyfile"
	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/ledger"
)

// Exit codes of auditd fsck.
const (
	fsckClean    = 0
	fsckFindings = 1
	fsckError    = 2
)

const fsckUsage = `Usage: auditd fsck --data-dir DIR [--log NAME] [--json] [flags]
       auditd fsck --server URL --verifier-key KEY [--log NAME] [--json] [flags]

Checks a stopped daemon's ledger offline, trusting nothing it stored. First
the checks serve runs when it opens the ledger, with serve's code (check
"open"): the storage layout is not newer than this version's; each log's
latest stored checkpoint verifies with the key; its checkpoint file and
guard copy verify, are one history, and the tree is not behind them and
matches their root; no file names a log storage does not hold. Pass the
daemon's --checkpoint-dir and --checkpoint-guard-dir (or its --config):
"fsck clean" means serve starts. Then the scrub re-reads every entry and
payload, recomputes their leaf hashes, rebuilds the tree and compares every
stored tile (with its level-4 hashes), the recorded root and every signed
checkpoint's root with it; the checkpoint audit verifies every stored
checkpoint's signature and its consistency with the latest. The store is
opened read-only: fsck writes nothing and signs nothing. Each finding names
its log and the entry, tile or checkpoint concerned.

With --server, fsck checks a running auditd through its public API instead,
trusting nothing it serves: each log's latest checkpoint must verify with
the verifier key, every entry is read and its leaf recomputed from its
fields, the tree rebuilt from them is compared with every tile and signed
checkpoint the server serves, and the checkpoint audit checks the
checkpoint history. The API serves no level-4 hashes, so an entry and its
tile that disagree are reported as the entry's. Nothing on the server's
disk is read: findings about its storage alone need fsck on its data dir.

Exit status:
  0  clean
  1  findings
  2  fsck could not run (no store, the daemon holds it, unreadable storage, bad key,
     a server unreachable or whose checkpoints do not verify)

`

// fsckFlags are auditd fsck's flags.
type fsckFlags struct {
	dataDir, only, keyFile, vkey string
	cpDir, guardDir, config      string
	server                       string
	jsonOut, quiet               bool
}

func runFsck(args []string, stdout, stderr io.Writer) int {
	var f fsckFlags
	fs := flag.NewFlagSet("fsck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "", "the daemon's data directory (required; the daemon must not be running on it)")
	fs.StringVar(&f.only, "log", "", "check only this log")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object with the findings on stdout")
	fs.StringVar(&f.keyFile, "key-file", "", "the checkpoint signing key whose verifier checks the checkpoints (default DATA-DIR/auditd.key; read, never created)")
	fs.StringVar(&f.vkey, "verifier-key", "", "check checkpoints with this verifier key (NAME+HASH+KEY, or @FILE) instead of the key file's")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	fs.StringVar(&f.cpDir, "checkpoint-dir", "", "the daemon's checkpoint_dir, if it sets one (default DATA-DIR/checkpoints)")
	fs.StringVar(&f.guardDir, "checkpoint-guard-dir", "", "the daemon's checkpoint_guard_dir, if it sets one; "+guardFlagUsage)
	fs.StringVar(&f.config, "config", "", "serve's YAML config: defaults for the data dir, key and checkpoint dirs")
	fs.StringVar(&f.server, "server", "", "check a running auditd at this URL through its public API instead of a data dir (needs --verifier-key or --key-file)")
	fs.Usage = func() {
		fmt.Fprint(stderr, fsckUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return fsckClean
		}
		return fsckError
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd fsck: "+format+"\n", a...)
		return fsckError
	}
	if f.server != "" {
		if f.dataDir != "" || f.config != "" || f.cpDir != "" || f.guardDir != "" || fs.NArg() > 0 {
			return fail("--server checks a server through its API: no --data-dir, --config, checkpoint dirs or arguments")
		}
		return runFsckServer(f, stdout, stderr)
	}
	if err := f.fromConfig(); err != nil {
		return fail("%v", err)
	}
	if f.dataDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return fail("--data-dir (or --server) is required and there are no arguments")
	}
	guard, err := checkpointGuardDir(f.guardDir)
	if err != nil {
		return fail("%v", err)
	}
	v, err := fsckVerifier(f.dataDir, f.keyFile, f.vkey)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(f.dataDir); err != nil {
		return fail("data dir: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rs, err := ledger.OpenRaw(f.dataDir, ledger.WithLogger(logger), ledger.WithCacheSize(256<<20))
	if err != nil {
		return fail("%v (is the daemon running on it?)", err)
	}
	defer rs.Close()
	src, logs, total, err := fsckSource(rs, f.only, f.dataDir)
	if err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	p := &fsckProgress{w: stderr, total: total, bar: !f.quiet && isTerminal(stderr), plain: !f.quiet && !isTerminal(stderr), start: start, lastLine: start}
	p.check = "open"
	runErr := fsckOpen(rs, v, f.only, f.cpDir, guard, p)
	for _, c := range []checkers.Checker{checkers.NewScrub(src, v), checkers.NewCheckpointAudit(src, v)} {
		p.check = c.Name()
		if runErr != nil {
			break
		}
		if err := c.Run(ctx, p); err != nil {
			runErr = err
			break
		}
	}
	p.finish()
	elapsed := time.Since(start)
	fsckPrint(stdout, f.jsonOut, p, logs, elapsed, runErr)
	if runErr != nil {
		return fail("%v", runErr)
	}
	if !f.quiet {
		fmt.Fprintf(stderr, "auditd fsck: %s, %s in %.1fs (%.0f entries/s): %s\n",
			plural.N(len(logs), "log", "logs"), plural.N(p.entries, "entry", "entries"), elapsed.Seconds(), float64(p.entries)/max(elapsed.Seconds(), 1e-9), plural.N(len(p.findings), "finding", "findings"))
	}
	if len(p.findings) > 0 {
		return fsckFindings
	}
	return fsckClean
}

// fromConfig applies --config: the defaults of the data dir, the key and
// the checkpoint dirs from serve's config.
func (f *fsckFlags) fromConfig() error {
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
	if f.keyFile == "" && f.vkey == "" {
		f.keyFile = cfg.KeyFile
	}
	if f.cpDir == "" {
		f.cpDir = cfg.CheckpointDir
	}
	if f.guardDir == "" {
		f.guardDir = cfg.CheckpointGuardDir
	}
	return nil
}

// fsckOpen runs the checks serve runs when it opens the ledger
// (ledger.RawStore.CheckOpen, the code ledger.Open runs), reporting what
// serve would refuse, or serve only read-only with --rollback-read-only,
// as findings: of the log named only, if set, and of the whole store.
func fsckOpen(rs *ledger.RawStore, v note.Verifier, only, cpDir, guard string, p *fsckProgress) error {
	res, err := rs.CheckOpen(v, ledger.WithCheckpointDir(cpDir), ledger.WithCheckpointGuardDir(guard))
	if err != nil {
		return fmt.Errorf("open checks: %w", err)
	}
	if res.Layout != nil {
		p.Found(checkers.Finding{Kind: "layout", Detail: res.Layout.Error() + ": serve refuses the store"})
	}
	for _, e := range res.Logs {
		if only == "" || e.Log == only {
			p.Found(checkers.Finding{Log: e.Log, Kind: e.Kind, Detail: e.Detail})
		}
	}
	return nil
}

// fsckSource is what fsck checks of rs: every log, or only the one named,
// with the number of entries they hold.
func fsckSource(rs *ledger.RawStore, only, dataDir string) (checkers.Source, []string, uint64, error) {
	var src checkers.Source = checkers.RawSource(rs)
	logs, err := rs.Logs()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("list logs: %w", err)
	}
	if only != "" {
		if !containsString(logs, only) {
			return nil, nil, 0, fmt.Errorf("no log %q in %s", only, dataDir)
		}
		src, logs = checkers.OnlyLog(src, only), []string{only}
	}
	var total uint64
	for _, name := range logs {
		if l, err := rs.Log(name); err == nil {
			total += l.Size()
			l.Close()
		}
	}
	return src, logs, total, nil
}

// fsckPrint prints the findings on stdout: one line each, or one JSON
// object with the run's figures.
func fsckPrint(stdout io.Writer, asJSON bool, p *fsckProgress, logs []string, elapsed time.Duration, runErr error) {
	if !asJSON {
		for _, f := range p.findings {
			if f.Log == "" { // the whole store
				fmt.Fprintf(stdout, "%s: %s: %s\n", f.check, f.Kind, f.Detail)
				continue
			}
			fmt.Fprintf(stdout, "%s: %s\n", f.check, f.Finding)
		}
		return
	}
	type jsonFinding struct {
		Check string `json:"check"`
		checkers.Finding
	}
	out := struct {
		Findings        []jsonFinding `json:"findings"`
		Logs            []string      `json:"logs"`
		Entries         uint64        `json:"entries"`
		DurationSeconds float64       `json:"duration_seconds"`
		Error           string        `json:"error,omitempty"`
	}{Findings: []jsonFinding{}, Logs: logs, Entries: p.entries, DurationSeconds: elapsed.Seconds()}
	if out.Logs == nil {
		out.Logs = []string{}
	}
	for _, f := range p.findings {
		out.Findings = append(out.Findings, jsonFinding{f.check, f.Finding})
	}
	if runErr != nil {
		out.Error = runErr.Error()
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// fsckVerifier returns the verifier of the checkpoints: from --verifier-key,
// or derived from the signing key file (never created here).
func fsckVerifier(dataDir, keyFile, vkey string) (note.Verifier, error) {
	if vkey != "" {
		if strings.HasPrefix(vkey, "@") {
			b, _, err := keyfile.Read("verifier key file", vkey[1:])
			if err != nil {
				return nil, err
			}
			vkey = strings.TrimSpace(string(b))
		}
		v, err := note.NewVerifier(vkey)
		if err != nil {
			return nil, fmt.Errorf("verifier key: %w", err)
		}
		return v, nil
	}
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "auditd.key")
	}
	b, _, err := readKeyFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --verifier-key)", err)
	}
	k, err := parseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", keyFile, err)
	}
	return k.verifier, nil
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

type checkedFinding struct {
	check string
	checkers.Finding
}

// fsckProgress is fsck's checkers.Progress: it keeps the findings and
// draws a progress bar on a terminal, or prints a line every 10 seconds
// otherwise.
type fsckProgress struct {
	w          io.Writer
	total      uint64
	bar, plain bool
	start      time.Time
	check      string
	mu         sync.Mutex
	entries    uint64
	findings   []checkedFinding
	lastDraw   time.Time
	lastLine   time.Time
	drawn      bool
}

func (p *fsckProgress) Checked(ctx context.Context, n int) error {
	p.mu.Lock()
	p.entries += uint64(n)
	now := time.Now()
	switch {
	case p.bar && now.Sub(p.lastDraw) >= 100*time.Millisecond:
		p.lastDraw = now
		p.draw()
	case p.plain && now.Sub(p.lastLine) >= 10*time.Second:
		p.lastLine = now
		fmt.Fprintf(p.w, "auditd fsck: %s: %d of %s checked, %s\n", p.check, p.entries, plural.N(p.total, "entry", "entries"), plural.N(len(p.findings), "finding", "findings"))
	}
	p.mu.Unlock()
	return ctx.Err()
}

func (p *fsckProgress) draw() {
	const width = 30
	done := min(p.entries, p.total)
	n := 0
	if p.total > 0 {
		n = int(done * width / p.total)
	}
	rate := float64(p.entries) / max(time.Since(p.start).Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r%-11s [%s%s] %d/%d entries, %.0f/s, %d findings ", p.check,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), done, p.total, rate, len(p.findings))
	p.drawn = true
}

func (p *fsckProgress) Found(f checkers.Finding) {
	p.mu.Lock()
	p.findings = append(p.findings, checkedFinding{p.check, f})
	p.mu.Unlock()
}

func (p *fsckProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		p.draw()
		fmt.Fprint(p.w, "\n")
	}
}

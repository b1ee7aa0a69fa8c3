package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
)

const compareUsage = `Usage: auditd-bench compare [-mode single|batch] [flags]

Drives several HTTP ingestion servers, each a child process started fresh
(new temporary data directory) for every round, with identical clients
(one keep-alive connection pool per target, as many connections as
-concurrency; -client picks net/http or fasthttp), payloads and duration,
in interleaved rounds (A B A B ...).
For each round and target it reports events/s, the server's CPU per event
(utime+stime of the child from /proc/PID/stat over the measured window),
the ack latency (POST start to response) and the time from POST start to
the first signed checkpoint covering it, and the 1-minute load average;
then the medians over rounds and their ratio to the reference target (the
median of the per-round ratios).

Targets (-targets, comma-separated; KIND or KIND=PATH of its binary):
  auditd      auditd serve (-auditd PATH, default: auditd beside this binary, else on $PATH)
  tessera     Tessera v1.0.4's POSIX conformance server, POST /add (-tessera PATH); single only
  decodeonly  this binary's decodeonly mode: reads and JSON-decodes the bodies, stores nothing
-mode single: one event per request, default targets auditd,tessera, -concurrency 1024.
-mode batch:  -batch events per NDJSON request, default targets auditd,decodeonly, -concurrency 8.
Two auditd binaries compare as -targets auditd=/tmp/old/auditd,auditd=/tmp/new/auditd.

`

// compareFlags are the flags of the compare mode.
type compareFlags struct {
	mode        string
	targets     []targetSpec
	ref         string
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	batch       int
	payload     int
	auditd      string
	auditdArgs  []string
	tessera     string
	poll        time.Duration
	cpWait      time.Duration
	jsonOut     string
	profileDir  string
	client      string
}

// targetSpec is one -targets entry.
type targetSpec struct {
	kind  string // auditd, tessera or decodeonly
	exe   string // its binary; "" for the default
	label string // its name in the report
}

func parseCompareFlags(args []string) (compareFlags, error) {
	var f compareFlags
	var targets, auditdArgs string
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.StringVar(&f.mode, "mode", "single", "single (one event per request) or batch (-batch events per NDJSON request)")
	fs.StringVar(&targets, "targets", "", "targets to compare, comma-separated KIND[=PATH] (default: auditd,tessera for single, auditd,decodeonly for batch)")
	fs.StringVar(&f.ref, "ref", "", "the reference target, by label, for the ratios (default: the last target)")
	fs.IntVar(&f.rounds, "rounds", 3, "interleaved rounds")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured time of each round")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "load before each round's measured window, not counted")
	fs.IntVar(&f.concurrency, "concurrency", 0, "concurrent requests (default 1024 for single, 8 for batch)")
	fs.IntVar(&f.batch, "batch", 1000, "events per request (batch)")
	fs.IntVar(&f.payload, "payload", 256, "payload bytes per event (JSON, unique per event)")
	fs.StringVar(&f.auditd, "auditd", "", "the auditd binary (default: auditd beside this binary, else on $PATH)")
	fs.StringVar(&auditdArgs, "auditd-args", "", "more flags for auditd serve, space-separated")
	fs.StringVar(&f.tessera, "tessera", "", "Tessera's POSIX conformance server binary (default: posix on $PATH, else /tmp/tbin/posix)")
	fs.DurationVar(&f.poll, "poll", 2*time.Millisecond, "checkpoint polling interval (the same for every target)")
	fs.DurationVar(&f.cpWait, "checkpoint-wait", 10*time.Second, "after a round, how long to wait for the checkpoints covering its acks")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&f.profileDir, "profile-dir", "", "after the rounds, one more unmeasured round per target that serves /debug/pprof (auditd, decodeonly), saving a CPU profile of its window to DIR/MODE_LABEL.pprof")
	fs.StringVar(&f.client, "client", "nethttp", "the load generator's HTTP client, the same for every target: nethttp (net/http, ~45 µs CPU per request here) or fasthttp (valyala/fasthttp, lighter, so more of the 2 cores go to the servers)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), compareUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return f, err
	}
	if f.mode != "single" && f.mode != "batch" {
		return f, usageError{fmt.Errorf("-mode %q: want single or batch", f.mode)}
	}
	if f.client != "nethttp" && f.client != "fasthttp" {
		return f, usageError{fmt.Errorf("-client %q: want nethttp or fasthttp", f.client)}
	}
	if f.mode == "single" {
		f.batch = 1
	}
	if f.concurrency == 0 {
		f.concurrency = map[string]int{"single": 1024, "batch": 8}[f.mode]
	}
	if f.rounds < 1 || f.concurrency < 1 || f.batch < 1 || f.duration <= 0 || f.warmup < 0 || f.poll <= 0 {
		return f, usageError{errors.New("-rounds, -concurrency, -batch, -duration and -poll must be positive, -warmup not negative")}
	}
	if f.payload < loadtest.MinStampedPayload {
		return f, usageError{fmt.Errorf("-payload must be at least %d", loadtest.MinStampedPayload)}
	}
	f.auditdArgs = strings.Fields(auditdArgs)
	var err error
	if f.targets, err = parseTargets(targets, f.mode); err != nil {
		return f, usageError{err}
	}
	if f.ref == "" {
		f.ref = f.targets[len(f.targets)-1].label
	}
	for _, t := range f.targets {
		if t.label == f.ref {
			return f, nil
		}
	}
	return f, usageError{fmt.Errorf("-ref %q is none of the targets", f.ref)}
}

// parseTargets parses -targets: KIND or KIND=PATH entries, labelled by
// KIND, or by PATH when one is given.
func parseTargets(s, mode string) ([]targetSpec, error) {
	if s == "" {
		s = map[string]string{"single": "auditd,tessera", "batch": "auditd,decodeonly"}[mode]
	}
	var out []targetSpec
	seen := map[string]bool{}
	for _, e := range strings.Split(s, ",") {
		kind, exe, _ := strings.Cut(strings.TrimSpace(e), "=")
		switch kind {
		case "auditd", "decodeonly":
		case "tessera":
			if mode == "batch" {
				return nil, errors.New("tessera takes one entry per request: -mode single only")
			}
		default:
			return nil, fmt.Errorf("target %q: want auditd, tessera or decodeonly", e)
		}
		t := targetSpec{kind: kind, exe: exe, label: kind}
		if exe != "" {
			t.label = exe
		}
		if seen[t.label] {
			return nil, fmt.Errorf("target %q given twice", t.label)
		}
		seen[t.label] = true
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no targets")
	}
	return out, nil
}

// runCompare is the compare mode.
func runCompare(args []string) error {
	f, err := parseCompareFlags(args)
	if err != nil {
		return done(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "auditd-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	targets := make([]*target, len(f.targets))
	for i, spec := range f.targets {
		if targets[i], err = newTarget(spec, f); err != nil {
			return err
		}
	}
	fmt.Printf("compare -mode %s: %d rounds of %v (after %v of warmup), %d concurrent requests of %d event(s), %d-byte payloads; load %s\n",
		f.mode, f.rounds, f.duration, f.warmup, f.concurrency, f.batch, f.payload, loadtest.LoadAvg(3))
	printRoundHeader()
	var rounds []roundResult
	for r := 1; r <= f.rounds; r++ {
		for _, t := range targets {
			res, err := runRound(ctx, t, f, r, tmp, "")
			if err != nil {
				return fmt.Errorf("compare: round %d, %s: %w", r, t.spec.label, err)
			}
			printRound(res)
			rounds = append(rounds, res)
		}
	}
	sum := summarize(f, rounds)
	printSummary(f, sum)
	if f.profileDir != "" {
		if err := profileTargets(ctx, targets, f, tmp); err != nil {
			return err
		}
	}
	return writeJSON(f.jsonOut, "compare", map[string]any{
		"compare_mode": f.mode, "rounds": rounds, "summary": sum, "reference": f.ref,
		"concurrency": f.concurrency, "batch": f.batch, "payload_bytes": f.payload,
		"round_seconds": f.duration.Seconds(), "warmup_seconds": f.warmup.Seconds(),
	})
}

// profileTargets runs one more round of each target that serves Go
// profiles, saving the profile of its measured window.
func profileTargets(ctx context.Context, targets []*target, f compareFlags, tmp string) error {
	if err := os.MkdirAll(f.profileDir, 0o755); err != nil {
		return err
	}
	for _, t := range targets {
		if t.spec.kind == "tessera" {
			fmt.Printf("profile: %s serves no Go profiles; skipped\n", t.spec.label)
			continue
		}
		path := filepath.Join(f.profileDir, f.mode+"_"+sanitizeLabel(t.spec.label)+".pprof")
		res, err := runRound(ctx, t, f, 0, tmp, path)
		if err != nil {
			return fmt.Errorf("compare: profiling %s: %w", t.spec.label, err)
		}
		fmt.Printf("profile: %s, %.0f events/s while profiled, CPU profile in %s (go tool pprof -top %s)\n",
			t.spec.label, res.EventsPerSec, path, path)
	}
	return nil
}

func sanitizeLabel(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, strings.TrimLeft(s, "/."))
}

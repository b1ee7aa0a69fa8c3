package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/plural"
)

// runFsckServer is auditd fsck --server: the scrub and the checkpoint audit
// of a running server's logs through its public API (checkers.RemoteSource),
// with the exit codes and output of fsck on a data dir.
func runFsckServer(f fsckFlags, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd fsck: "+format+"\n", a...)
		return fsckError
	}
	if f.vkey == "" && f.keyFile == "" {
		return fail("--server needs the key the server signs with: --verifier-key (or --key-file)")
	}
	v, err := fsckVerifier("", f.keyFile, f.vkey)
	if err != nil {
		return fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := client.New(f.server, v)
	src := checkers.RemoteSource(c)
	logs, err := src.Logs(ctx)
	if err != nil {
		return fail("list logs of %s: %v", f.server, err)
	}
	if f.only != "" {
		if !containsString(logs, f.only) {
			return fail("no log %q on %s", f.only, f.server)
		}
		src, logs = checkers.OnlyLog(src, f.only), []string{f.only}
	}
	var total uint64
	for _, name := range logs {
		if cp, _, err := c.Checkpoint(ctx, name); err == nil {
			total += cp.Size
		}
	}
	start := time.Now()
	p := &fsckProgress{w: stderr, total: total, bar: !f.quiet && isTerminal(stderr), plain: !f.quiet && !isTerminal(stderr), start: start, lastLine: start}
	var runErr error
	for _, ch := range []checkers.Checker{checkers.NewScrub(src, v), checkers.NewCheckpointAudit(src, v)} {
		p.check = ch.Name()
		if runErr = ch.Run(ctx, p); runErr != nil {
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
		fmt.Fprintf(stderr, "auditd fsck: %s: %s, %s in %.1fs (%.0f entries/s): %s\n", f.server,
			plural.N(len(logs), "log", "logs"), plural.N(p.entries, "entry", "entries"), elapsed.Seconds(), float64(p.entries)/max(elapsed.Seconds(), 1e-9), plural.N(len(p.findings), "finding", "findings"))
	}
	if len(p.findings) > 0 {
		return fsckFindings
	}
	return fsckClean
}

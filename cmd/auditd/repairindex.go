package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const repairIndexUsage = `Usage: auditd repair-index --data-dir DIR [--log NAME] [--dry-run] [flags]

Rebuilds the id and leaf-hash index chunks of a stopped daemon's ledger
that differ from their entries: what auditd fsck and the self-audit report
as index_mismatch. A damaged chunk makes lookups miss: a retried event is
appended again instead of being answered as a duplicate, and an entry is
not found by its leaf hash. Every chunk is compared with the keys rebuilt
from its entries; each one that differs is replaced in one synced write. A
chunk is rebuilt only when all of its 65,536 entries are stored, decode and
hash to the leaves of the tree's tiles; otherwise it is left as it is and
named (repair or restore those entries first: fsck says which). Entries,
tiles and checkpoints are never written. Running it again after an
interruption finishes the rest.

The daemon must not be running on DIR: the ledger's lock refuses it.

Exit status:
  0  nothing differed, or every chunk that differed was rebuilt (--dry-run: nothing differed)
  1  a chunk was left as it was, or differs (--dry-run), or the repair failed
  2  a bad command line

`

type repairIndexFlags struct {
	dataDir, log, keyFile, cpDir string
	dryRun, quiet                bool
}

func runRepairIndex(args []string, stdout, stderr io.Writer) int {
	var f repairIndexFlags
	fs := flag.NewFlagSet("repair-index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "", "the daemon's data directory (required; the daemon must not be running on it)")
	fs.StringVar(&f.log, "log", "", "repair only this log (default: every log)")
	fs.StringVar(&f.keyFile, "key-file", "", "the checkpoint signing key (default DATA-DIR/auditd.key; read, never created)")
	fs.StringVar(&f.cpDir, "checkpoint-dir", "", "the daemon's checkpoint_dir, if it sets one")
	fs.BoolVar(&f.dryRun, "dry-run", false, "say which chunks differ and write nothing")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, repairIndexUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if f.dataDir == "" || fs.NArg() > 0 {
		fs.Usage()
		fmt.Fprintln(stderr, "auditd repair-index: --data-dir is required and there are no arguments")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clean, err := repairIndex(ctx, f, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "auditd repair-index:", err)
		return 1
	}
	if !clean {
		return 1
	}
	return 0
}

// repairIndex repairs the logs f names and reports whether nothing is
// left differing.
func repairIndex(ctx context.Context, f repairIndexFlags, stdout, stderr io.Writer) (bool, error) {
	st, err := openStopped(f.dataDir, f.keyFile, f.cpDir, stderr)
	if err != nil {
		return false, err
	}
	defer st.Close()
	var names []string
	if f.log != "" {
		names = []string{f.log}
	} else {
		for _, li := range st.Logs() {
			names = append(names, li.Name)
		}
	}
	clean := true
	for _, name := range names {
		l, err := st.Log(name)
		if err != nil {
			return false, fmt.Errorf("no log %q in %s", name, f.dataDir)
		}
		var progress func(done, total uint64)
		if !f.quiet {
			last := time.Now()
			progress = func(done, total uint64) {
				if time.Since(last) >= 2*time.Second || done == total {
					fmt.Fprintf(stderr, "%s: %d/%d entries read\n", name, done, total)
					last = time.Now()
				}
			}
		}
		start := time.Now()
		reps, err := l.RepairIndex(ctx, f.dryRun, progress)
		for _, r := range reps {
			what := "rebuilt"
			switch {
			case r.Refused != "":
				what, clean = "left as it is: "+r.Refused, false
			case !r.Repaired:
				what, clean = "differs (dry run: not rebuilt)", false
			}
			fmt.Fprintf(stdout, "%s: %s index chunk %d: %s; it had: %s\n", name, r.Index, r.Chunk, what, r.Detail)
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w (run it again to finish)", name, err)
		}
		if len(reps) == 0 {
			fmt.Fprintf(stdout, "%s: every index chunk matches its entries (%.1fs)\n", name, time.Since(start).Seconds())
		}
	}
	return clean, st.Close()
}

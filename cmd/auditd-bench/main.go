// Command auditd-bench measures auditd: durable appends, HTTP ingestion
// with the time to the covering checkpoint, proof serving, Kafka ingestion,
// and derivation checks. It is a separate binary so that the shipped
// auditd does not link the load generators:
//
//	go run ./cmd/auditd-bench <mode> [flags]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

const usage = `Usage: auditd-bench MODE [flags]   (or: go run ./cmd/auditd-bench MODE [flags])

Modes:
  append   durable appends to an in-process ledger (no HTTP)
  http     HTTP ingestion: POST batches to a server, time append and checkpoint
  proofs   inclusion proofs over HTTP against one log
  kafka    Kafka ingestion from an in-process broker (see "auditd-bench kafka -h")
  derive   a derivation check end to end against PostgreSQL (see "auditd-bench derive -h")
  verify   that check through auditd verify --server's remote ledger (see "auditd-bench verify -h")
  compare  auditd side by side with Tessera's POSIX server or a decode-only server, each a
           child process, in interleaved rounds (see "auditd-bench compare -h")
  decodeonly  the decode-only reference server compare starts (internal; -listen ADDR)
  logs     memory of an auditd serve child holding many one-event logs, and its restart
           time with them (see "auditd-bench logs -h")

Without -server, http and proofs start an auditd API on a loopback port in
this process, with a temporary data directory. Every mode prints events (or
proofs) per second and latency percentiles. Payloads are 256 bytes and ids
36-character UUIDs unless flags say otherwise.

`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "auditd-bench:", err)
		os.Exit(exitStatus(err))
	}
}

// run runs the mode args name with its flags.
func run(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Print(usage)
			return nil
		}
		fmt.Fprint(os.Stderr, usage)
		return usageError{errors.New("name a mode")}
	}
	mode, rest := args[0], args[1:]
	switch mode {
	case "append":
		return runAppend(rest)
	case "http":
		return runHTTP(rest)
	case "proofs":
		return runProofs(rest)
	case "kafka":
		return runKafka(rest)
	case "derive":
		return runDerive(rest)
	case "verify":
		return runVerify(rest)
	case "compare":
		return runCompare(rest)
	case "decodeonly":
		return runDecodeOnly(rest)
	case "logs":
		return runLogs(rest)
	case "help":
		fmt.Print(usage)
		return nil
	}
	return usageError{fmt.Errorf("unknown mode %q (append, http, proofs, kafka, derive, verify, compare, decodeonly, logs)", mode)}
}

// usageError is a command line the mode cannot run: it exits 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func exitStatus(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// parseFlags parses args into fs: nil with -h (after printing the usage),
// errHelp, or a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err}
	}
	return nil
}

// errHelp is returned by parseFlags after -h: the mode ends with no error.
var errHelp = errors.New("help")

// done ends a mode: nil after -h, else err.
func done(err error) error {
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// writeJSON writes a mode's results to path, if set, with its mode.
func writeJSON(path, mode string, res map[string]any) error {
	if path == "" {
		return nil
	}
	res["mode"] = mode
	b, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

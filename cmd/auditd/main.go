// Command auditd is the auditd daemon and its tools: serve the ledger and
// proof API, generate signing keys, prove an event's inclusion against a
// running server, check derived views and a stopped ledger. The load
// generators are a separate command, cmd/auditd-bench.
package main

import (
	"errors"
	"fmt"
	"os"
)

const usage = `auditd: an append-only, Merkle-committed event ledger with signed checkpoints.

Usage:
  auditd serve   [flags]   run the daemon (ledger, proof API, Kafka source, metrics)
  auditd check-config [flags]  check what serve would load (config, derivations, keys, TLS) without starting it
  auditd demo    [flags]   run the daemon on an in-process Kafka broker with sample events
  auditd keygen  [flags]   create a checkpoint signing key
  auditd prove   [flags]   verify an event's inclusion against a running server
  auditd verify  [flags]   check derived views against the ledger once (for CI)
  auditd fsck    [flags]   check a stopped daemon's ledger offline (scrub, checkpoint audit)
  auditd prune   [flags]   delete a stopped daemon's old payloads, keeping every proof
  auditd repair-index [flags]  rebuild a stopped daemon's index chunks that differ from their entries
  auditd backup  [flags]   take a consistent backup of a running daemon's ledger (--server URL --out FILE)
  auditd restore [flags]   restore a backup into an empty data dir and fsck it (--from FILE --data-dir DIR)
  auditd status  [flags]   show a running server's logs, derivations, checks and alerts
  auditd alerts  [flags]   list a running server's alerts, or follow them live
  auditd bench             moved: go run ./cmd/auditd-bench <mode> (load generators, not in this binary)
  auditd version [--json]  print the build (module version, VCS revision, Go version); also --version

Run "auditd <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "serve":
		err = runServe(args)
	case "check-config":
		os.Exit(runCheckConfig(args, os.Stdout, os.Stderr))
	case "demo":
		err = runDemo(args)
	case "keygen":
		err = runKeygen(args)
	case "verify":
		os.Exit(runVerify(args, os.Stdout, os.Stderr))
	case "fsck":
		os.Exit(runFsck(args, os.Stdout, os.Stderr))
	case "prune":
		os.Exit(runPrune(args, os.Stdout, os.Stderr))
	case "repair-index":
		os.Exit(runRepairIndex(args, os.Stdout, os.Stderr))
	case "prove":
		os.Exit(runProve(args, os.Stdout, os.Stderr))
	case "backup":
		os.Exit(runBackup(args, os.Stdout, os.Stderr))
	case "restore":
		os.Exit(runRestore(args, os.Stdout, os.Stderr))
	case "status":
		os.Exit(runStatus(args, os.Stdout, os.Stderr))
	case "alerts":
		os.Exit(runAlerts(args, os.Stdout, os.Stderr))
	case "version", "--version":
		os.Exit(runVersion(args, os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "auditd: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "auditd:", err)
		os.Exit(exitStatus(err))
	}
}

// usageError is a command line the command cannot run: a bad flag, a
// missing or extra argument. It exits 2 for every command.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitStatus is 2 for a usage error or a configuration error (see
// configError), 1 for any other.
func exitStatus(err error) int {
	var ue usageError
	var ce configError
	if errors.As(err, &ue) || errors.As(err, &ce) {
		return 2
	}
	return 1
}

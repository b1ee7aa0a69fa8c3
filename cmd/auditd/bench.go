package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// benchMoved is what "auditd bench" prints: the load modes live in their
// own binary, so that the shipped auditd does not link the generators.
const benchMoved = `auditd bench has moved to its own command, which the auditd binary does not include:

  go run ./cmd/auditd-bench <mode> [flags]      (from a checkout of the auditd source)

Modes: append, http, proofs, kafka, derive, verify; the flags are the same as before.
`

// runBench prints where the benchmarks went, whatever args it is given;
// it exits 2.
func runBench(args []string) error { return benchMovedError(os.Stderr) }

func benchMovedError(stderr io.Writer) error {
	fmt.Fprint(stderr, benchMoved)
	return usageError{errors.New("bench: moved to go run ./cmd/auditd-bench")}
}

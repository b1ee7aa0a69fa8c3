package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
)

// runProve verifies an event's inclusion against a running server. Exit
// codes: 0 verified, 1 a check failed, 2 usage or network error.
func runProve(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("prove", flag.ContinueOnError)
	fset.SetOutput(stderr)
	server := fset.String("server", "http://127.0.0.1:8080", "auditd server URL")
	log := fset.String("log", "", "log name (required)")
	id := fset.String("id", "", "event id to prove")
	index := fset.Int64("index", -1, "entry index to prove (instead of -id)")
	vkey := fset.String("verifier-key", "", "checkpoint verifier key (NAME+HASH+KEY)")
	vkeyFile := fset.String("verifier-key-file", "", "file holding the verifier key")
	prev := fset.String("previous-checkpoint", "", "a checkpoint saved earlier: also prove the log only grew since")
	save := fset.String("save-checkpoint", "", "write the verified checkpoint to this file")
	token := fset.String("token", os.Getenv("AUDITD_READ_TOKEN"), "bearer token if the server protects reads")
	timeout := fset.Duration("timeout", 30*time.Second, "overall time limit")
	wp := bindWitnessPolicyFlags(fset) // witness.go
	fset.Usage = func() {
		fmt.Fprintf(stderr, `Usage: auditd prove -log LOG (-id ID | -index N) (-verifier-key KEY | -verifier-key-file F) [flags]

Fetches the log's checkpoint and verifies its signature, fetches the entry,
recomputes its leaf hash from its fields, and verifies its inclusion proof
against the checkpoint. With -previous-checkpoint it also verifies that the
log is consistent with (only grew from) that earlier checkpoint.
Exit status: 0 verified, 1 a check failed, 2 usage or network error.

`)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "auditd prove: "+format+"\n", a...)
		return code
	}
	if *log == "" || (*id == "") == (*index < 0) {
		return fail(2, "need -log and exactly one of -id or -index")
	}
	key := *vkey
	if *vkeyFile != "" {
		b, err := os.ReadFile(*vkeyFile)
		if err != nil {
			return fail(2, "%v", err)
		}
		key = strings.TrimSpace(string(b))
	}
	if key == "" {
		return fail(2, "need -verifier-key or -verifier-key-file: the key must come from a source you trust, not from the server")
	}
	v, err := note.NewVerifier(key)
	if err != nil {
		return fail(2, "verifier key: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	wopts, err := wp.options()
	if err != nil {
		return fail(2, "%v", err)
	}
	c := client.New(*server, v, wopts...).WithToken(*token)
	code := func(err error) int {
		if errors.Is(err, client.ErrVerification) {
			return fail(1, "FAILED: %v", err)
		}
		return fail(2, "%v", err)
	}

	cp, signed, err := c.Checkpoint(ctx, *log)
	if err != nil {
		return code(err)
	}
	fmt.Fprintf(stdout, "checkpoint  %s  size %d  root %s  signature OK (%s)\n", c.Origin(*log), cp.Size, cp.Root, v.Name())
	var e *client.Entry
	if *id != "" {
		e, err = c.EntryByID(ctx, *log, *id)
	} else {
		e, err = c.Entry(ctx, *log, uint64(*index))
	}
	if err != nil {
		return code(err)
	}
	if err := c.ProveEntry(ctx, *log, e, cp); err != nil {
		return code(err)
	}
	fmt.Fprintf(stdout, "entry       index %d  id %q  leaf %s  recomputed from its fields OK\n", e.Index, e.ID, e.LeafHash)
	fmt.Fprintf(stdout, "inclusion   index %d in tree of size %d  OK\n", e.Index, cp.Size)
	if *prev != "" {
		b, err := os.ReadFile(*prev)
		if err != nil {
			return fail(2, "%v", err)
		}
		old, err := c.OpenCheckpoint(b, *log)
		if err != nil {
			return code(err)
		}
		if err := c.ProveConsistency(ctx, *log, old, cp); err != nil {
			return code(err)
		}
		fmt.Fprintf(stdout, "consistency size %d -> %d  OK\n", old.Size, cp.Size)
	}
	if *save != "" {
		if err := os.WriteFile(*save, signed, 0o644); err != nil {
			return fail(2, "%v", err)
		}
	}
	fmt.Fprintln(stdout, "VERIFIED")
	return 0
}

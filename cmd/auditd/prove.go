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
	"github.com/auditd/auditd/witness"
)

const proveUsage = `Usage: auditd prove -log LOG (-id ID | -index N) (-verifier-key KEY | -verifier-key-file F) [flags]

Fetches the log's checkpoint and verifies its signature, fetches the entry,
recomputes its leaf hash from its fields, and verifies its inclusion proof
against the checkpoint. With -previous-checkpoint it also verifies that the
log is consistent with (only grew from) that earlier checkpoint.
Exit status: 0 verified, 1 a check failed, 2 usage or network error.

`

// proveFlags are auditd prove's flags.
type proveFlags struct {
	server, log, id, vkey, vkeyFile, prev, save, token string
	index                                              int64
	timeout                                            time.Duration
	wp                                                 witnessPolicyFlags // witness.go
	tls                                                clientTLSFlags     // tls.go
}

// proveFailure is a prove that did not verify, with its exit code.
type proveFailure struct {
	code int
	err  error
}

func (f proveFailure) Error() string { return f.err.Error() }

// runProve verifies an event's inclusion against a running server. Exit
// codes: 0 verified, 1 a check failed, 2 usage or network error.
func runProve(args []string, stdout, stderr io.Writer) int {
	var f proveFlags
	fset := flag.NewFlagSet("prove", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the auditd server: a URL, or host:port for http://host:port")
	fset.StringVar(&f.log, "log", "", "log name (required)")
	fset.StringVar(&f.id, "id", "", "event id to prove")
	fset.Int64Var(&f.index, "index", -1, "entry index to prove (instead of -id)")
	fset.StringVar(&f.vkey, "verifier-key", "", "checkpoint verifier key (NAME+HASH+KEY), or @FILE")
	fset.StringVar(&f.vkeyFile, "verifier-key-file", "", "file holding the verifier key")
	fset.StringVar(&f.prev, "previous-checkpoint", "", "a checkpoint saved earlier: also prove the log only grew since")
	fset.StringVar(&f.save, "save-checkpoint", "", "write the verified checkpoint to this file")
	fset.StringVar(&f.token, "token", os.Getenv("AUDITD_READ_TOKEN"), "bearer token if the server protects reads")
	fset.DurationVar(&f.timeout, "timeout", 30*time.Second, "overall time limit")
	bindWitnessPolicyFlags(fset, &f.wp)
	bindClientTLSFlags(fset, &f.tls)
	fset.Usage = func() {
		fmt.Fprint(stderr, proveUsage)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := prove(f, stdout); err != nil {
		var pf proveFailure
		if !errors.As(err, &pf) {
			pf = proveFailure{2, explainTLS(err)}
		}
		if pf.code == 1 {
			fmt.Fprintf(stderr, "auditd prove: FAILED: %v\n", pf.err)
		} else {
			fmt.Fprintf(stderr, "auditd prove: %v\n", pf.err)
		}
		return pf.code
	}
	return 0
}

// proveKey is the verifier of -verifier-key or -verifier-key-file.
func proveKey(f proveFlags) (note.Verifier, error) {
	key, err := verifierKeyArg(f.vkey, f.vkeyFile)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, errors.New("need -verifier-key or -verifier-key-file: the key must come from a source you trust, not from the server")
	}
	v, err := note.NewVerifier(key)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	return v, nil
}

// prove runs the checks, printing each one verified; a check that failed
// is a proveFailure of code 1, anything else (usage, network) code 2.
func prove(f proveFlags, stdout io.Writer) error {
	if f.log == "" || (f.id == "") == (f.index < 0) {
		return errors.New("need -log and exactly one of -id or -index")
	}
	v, err := proveKey(f)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	wopts, err := f.wp.options()
	if err != nil {
		return err
	}
	base, err := serverURL(f.server, f.tls) // serverurl.go
	if err != nil {
		return err
	}
	tc, err := f.tls.config()
	if err != nil {
		return err
	}
	c := client.New(base, v, append(wopts, client.WithTLSConfig(tc), client.WithToken(f.token))...)
	checked := func(err error) error {
		if errors.Is(err, client.ErrVerification) {
			return proveFailure{1, err}
		}
		return err
	}
	cp, signed, err := c.Checkpoint(ctx, f.log)
	if err != nil {
		return checked(err) // a wrong key names the key given and the checkpoint's signers (client.OpenCheckpoint)
	}
	fmt.Fprintf(stdout, "checkpoint  %s  size %d  root %s  signature OK (%s)\n", c.Origin(f.log), cp.Size, cp.Root, v.Name())
	if len(f.wp.keys) > 0 {
		// The client checked the policy with the checkpoint; say who cosigned.
		p, err := witness.NewPolicy(f.wp.threshold, f.wp.keys...)
		if err != nil {
			return err
		}
		names, err := p.Check(signed)
		if err != nil {
			return checked(fmt.Errorf("%w: %v", client.ErrVerification, err))
		}
		fmt.Fprintf(stdout, "witnesses   cosigned by %s (%d of %d needed)  OK\n", strings.Join(names, ", "), p.Threshold, len(p.Verifiers))
	}
	var e *client.Entry
	if f.id != "" {
		e, err = c.EntryByID(ctx, f.log, f.id)
	} else {
		e, err = c.Entry(ctx, f.log, uint64(f.index))
	}
	if err != nil {
		return checked(err)
	}
	if err := c.ProveEntry(ctx, f.log, e, cp); err != nil {
		return checked(err)
	}
	fmt.Fprintf(stdout, "entry       index %d  id %q  leaf %s  recomputed from its fields OK\n", e.Index, e.ID, e.LeafHash)
	fmt.Fprintf(stdout, "inclusion   index %d in tree of size %d  OK\n", e.Index, cp.Size)
	if f.prev != "" {
		b, err := os.ReadFile(f.prev)
		if err != nil {
			return err
		}
		old, err := c.OpenCheckpoint(b, f.log)
		if err != nil {
			return checked(err)
		}
		if err := c.ProveConsistency(ctx, f.log, old, cp); err != nil {
			return checked(err)
		}
		fmt.Fprintf(stdout, "consistency size %d -> %d  OK\n", old.Size, cp.Size)
	}
	if f.save != "" {
		if err := os.WriteFile(f.save, signed, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "VERIFIED")
	return nil
}

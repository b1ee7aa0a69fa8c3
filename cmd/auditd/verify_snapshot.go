package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/rederive"
)

// snapshotRunner is the runner of auditd verify --from-snapshot for job:
// it fetches the snapshot the server publishes for the derivation and
// starts the fold from it, after the runner checks it: its note signed by
// --verifier-key (the daemon signs snapshots with its checkpoint key), the
// spec's fingerprint, the state's SHA-256, and each pin against the log's
// signed checkpoints (the pin's checkpoint, consistent with the current
// one). A snapshot that does not check out fails the run as a
// verification failure (exit 3).
func snapshotRunner(ctx context.Context, f verifyFlags, lg rederive.Ledger, job rederive.Job, logger *slog.Logger,
	progress func(string, uint64, uint64)) (*rederive.Runner, error) {
	remote, ok := lg.(*rederive.RemoteLedger)
	if !ok {
		return nil, errors.New("--from-snapshot needs --server")
	}
	v, err := verifierFlag(f.vkey)
	if err != nil {
		return nil, err
	}
	b, err := remote.Client.DerivationSnapshot(ctx, job.Derivation.Name())
	if err != nil {
		return nil, fmt.Errorf("fetch the snapshot: %w", err)
	}
	var s rederive.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("the server's snapshot: %w", err)
	}
	return rederive.NewRunner(lg, rederive.WithWorkers(f.workers), rederive.WithLogger(logger), rederive.WithNoMatchIsError(),
		rederive.WithProgress(progress), rederive.WithSnapshot(&s, v)), nil
}

// verifierFlag parses --verifier-key (a key, or @FILE).
func verifierFlag(key string) (note.Verifier, error) {
	if strings.HasPrefix(key, "@") {
		b, err := os.ReadFile(key[1:])
		if err != nil {
			return nil, fmt.Errorf("verifier key: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	v, err := note.NewVerifier(key)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	return v, nil
}

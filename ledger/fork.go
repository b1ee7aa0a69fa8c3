package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/auditd/auditd/internal/durable"
)

// forkDir is the directory, inside the store's, of the fork marks: one
// file per log put read-only by Forked, holding its evidence.
const forkDir = "forked"

// Forked puts the log read-only on positive evidence from outside the
// ledger that it published two histories: a witness that holds a larger
// checkpoint of it than the log has signed, or one that cannot verify the
// log's consistency proof or holds another root at the same size; a peer
// whose checkpoint of this log contradicts ours. Whatever the cause (a data
// directory restored from an older copy, a WAL tail lost with the
// checkpoint files, two instances signing with one key), signing on would
// publish more of a history that is already contradicted, so the log signs
// nothing more and refuses appends with ErrReadOnly naming the evidence.
//
// The mark is durable: a file <data dir>/forked/<log> holds the evidence,
// and Open opens a log with a mark read-only, reporting it again, until an
// operator who has settled which history stands removes the file
// (docs/runbook.md, "AuditdLogForked").
//
// source names who gave the evidence ("witness w1.example"), detail what
// it is. The failure is recorded like every integrity failure (logged,
// counted, passed to the integrity handler) with kind IntegrityFork. The
// first evidence is the one appends name; later calls are recorded too.
// Forked returns once no checkpoint can be signed any more: a checkpoint
// being signed when it is called is published before it returns, none
// after.
func (l *Log) Forked(source, detail string) *IntegrityError {
	e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityFork,
		Detail: fmt.Sprintf("%s: %s", source, detail)})
	// Under the signer's lock: sign checks readOnly before it signs, so
	// once this holds the lock no later checkpoint is signed.
	l.signer.mu.Lock()
	l.setReadOnly(e)
	l.signer.mu.Unlock()
	if err := l.s.markForked(l.name, e); err != nil {
		l.s.log.Error("fork mark not written: the log is read-only until a restart only", "log", l.name, "err", err)
	}
	l.wakeWaiters() // a waiter for a checkpoint that will not come learns why
	return e
}

// markForked appends e to the log's fork mark, durably.
func (s *Store) markForked(log string, e *IntegrityError) error {
	dir := filepath.Join(s.dir, forkDir)
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, log)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	line := fmt.Sprintf("%s %s\n", time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(e.Detail, "\n", " "))
	if len(old) > 64<<10 {
		return nil // the first pieces of evidence are kept; more add nothing
	}
	return durable.WriteFile(path, append(old, line...), 0o600)
}

// forkMark returns the evidence in the log's fork mark, or "" if it has
// none.
func (s *Store) forkMark(log string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, forkDir, log))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// reopenForked opens read-only the logs with a fork mark (Open, before the
// logs start).
func (s *Store) reopenForked() error {
	for name, l := range s.logs {
		ev, err := s.forkMark(name)
		if err != nil {
			return fmt.Errorf("ledger: fork mark of %s: %w", name, err)
		}
		if ev == "" {
			continue
		}
		e := s.integrity(&IntegrityError{Log: name, Index: -1, Kind: IntegrityFork,
			Detail: fmt.Sprintf("marked forked (%s); remove %s once the history that stands is settled: %s",
				"evidence kept across restarts", filepath.Join(s.dir, forkDir, name), ev)})
		l.setReadOnly(e)
		s.log.Warn("log opened read-only: fork evidence on record", "log", name)
	}
	return nil
}

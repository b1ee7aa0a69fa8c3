package ledger

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/internal/durable"
	"github.com/auditd/auditd/merkle"
)

// The latest signed checkpoint of every log is also kept outside Pebble, in
// a file of its own (<checkpoint dir>/<log name>, the signed note as
// served), replaced atomically and durably with each checkpoint before the
// checkpoint is published. A store that loses writes it had synced (a disk
// or file system dropping the tail of Pebble's WAL) would otherwise reopen
// behind checkpoints it has already served, and sign different ones at the
// same sizes: a fork. On open each log's tree is checked against its file
// (see admit), and sign never signs below or beside it.

// maxCheckpointFile bounds what is read of a checkpoint file; a signed
// checkpoint is a few hundred bytes.
const maxCheckpointFile = 64 << 10

// WithCheckpointDir sets the directory of the checkpoint files (default
// "checkpoints" inside the store's directory). Keeping it on another disk
// or file system guards against losing both together.
func WithCheckpointDir(dir string) Option { return func(o *options) { o.checkpointDir = dir } }

// WithReadOnlyOnRollback lets Open succeed when a log is behind, or
// inconsistent with, the checkpoint in its checkpoint file: that log opens
// read-only (reads and proofs serve what storage holds; appends fail with
// ErrReadOnly; it never signs) and the failure is reported to the
// integrity handler with kind IntegrityRollback (or IntegrityCheckpointBad
// for a file that does not verify). Without it Open refuses such a store
// with a *RollbackError.
func WithReadOnlyOnRollback(on bool) Option { return func(o *options) { o.readOnlyOnRollback = on } }

// RollbackError refuses to open a store in which logs contradict the
// checkpoints their checkpoint files hold: storage lost entries it had
// acknowledged and signed, or holds different ones. errors.Is(err,
// ErrIntegrity) is true, and errors.As finds each log's *IntegrityError.
type RollbackError struct {
	Dir  string            // the checkpoint files' directory
	Logs []*IntegrityError // one per log, in name order
}

func (e *RollbackError) Error() string {
	var b strings.Builder
	names := make([]string, len(e.Logs))
	for i, p := range e.Logs {
		names[i] = p.Log
	}
	fmt.Fprintf(&b, "ledger: refusing to open: log %s contradicts the signed checkpoint kept in %s:", strings.Join(names, ", "), e.Dir)
	for _, p := range e.Logs {
		fmt.Fprintf(&b, " %s: %s;", p.Log, p.Detail)
	}
	b.WriteString(" signing on would fork the log. Restore the data directory from a backup (or a replica) that holds the signed entries, " +
		"or open the logs read-only as they are (auditd serve --rollback-read-only, ledger.WithReadOnlyOnRollback) to serve what is left; " +
		"see docs/operations.md, \"log refused at start\"")
	return b.String()
}

// Is makes errors.Is(err, ErrIntegrity) true.
func (e *RollbackError) Is(target error) bool { return target == ErrIntegrity }

// Unwrap returns the logs' integrity errors.
func (e *RollbackError) Unwrap() []error {
	out := make([]error, len(e.Logs))
	for i, p := range e.Logs {
		out[i] = p
	}
	return out
}

// checkpointFiles is the directory of checkpoint files.
type checkpointFiles struct {
	dir string
	// beforeWrite, if set, runs before each file write: tests stall the
	// disk with it.
	beforeWrite func(log string)
}

func (c checkpointFiles) path(log string) string { return filepath.Join(c.dir, log) }

// list creates the directory if needed, removes temporary files a crash
// left, and returns the names of the logs that have a file.
func (c checkpointFiles) list(s *Store) (map[string]bool, error) {
	if err := durable.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: checkpoint files: %w", err)
	}
	removed, err := durable.RemoveTemp(c.dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: checkpoint files: %w", err)
	}
	if len(removed) > 0 {
		s.log.Info("removed temporary checkpoint files left by a crash", "dir", c.dir, "files", removed)
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("ledger: checkpoint files: %w", err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		if !ValidLogName(e.Name()) || e.IsDir() {
			s.log.Warn("ignoring a file that cannot be a log's checkpoint file", "dir", c.dir, "file", e.Name())
			continue
		}
		names[e.Name()] = true
	}
	return names, nil
}

// read returns the log's checkpoint file, or an error wrapping
// os.ErrNotExist if it has none.
func (c checkpointFiles) read(log string) ([]byte, error) {
	f, err := os.Open(c.path(log))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCheckpointFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", c.path(log), maxCheckpointFile)
	}
	return b, nil
}

func (c checkpointFiles) write(log string, note []byte) error {
	if c.beforeWrite != nil {
		c.beforeWrite(log)
	}
	if err := durable.WriteFile(c.path(log), note, 0o600); err != nil {
		return fmt.Errorf("ledger: %s: write checkpoint file: %w", log, err)
	}
	return nil
}

// readPin reads the log's checkpoint file into l.pinned. A missing file
// leaves it nil; a file that does not verify is an IntegrityCheckpointBad.
func (l *Log) readPin() *IntegrityError {
	l.pinned = nil
	b, err := l.s.cpFiles.read(l.name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		var c merkle.Checkpoint
		if c, err = merkle.OpenCheckpoint(b, l.s.verifier, l.Origin()); err == nil {
			l.pinned = &SignedCheckpoint{Checkpoint: c, Note: b}
			return nil
		}
	}
	return &IntegrityError{Log: l.name, Index: -1, Kind: IntegrityCheckpointBad,
		Detail: fmt.Sprintf("checkpoint file %s does not hold a checkpoint of this log signed by this key (%v); if storage is known to be intact, remove the file and it is rebuilt from the latest stored checkpoint", l.s.cpFiles.path(l.name), err)}
}

// admit checks the loaded tree against the log's checkpoint file and
// publishes the latest checkpoint; stored is the latest checkpoint in
// Pebble (verified against the tree by load), or nil. It returns the
// integrity failure that makes the log refused or read-only:
//
//   - the file does not verify (IntegrityCheckpointBad);
//   - the tree is smaller than the file's checkpoint (IntegrityRollback);
//   - the tree's root at the file's size differs from the file's root
//     (IntegrityRollback, inconsistent).
//
// Otherwise the file is brought up to the stored checkpoint (or created
// from it, for a log from before checkpoint files) before that is
// published, and a file newer than anything stored is published itself.
func (l *Log) admit(stored *SignedCheckpoint, r merkle.HashReader) (*IntegrityError, error) {
	size := l.w.size
	bad := l.readPin()
	pin := l.pinned
	switch {
	case bad != nil:
	case pin != nil && size < pin.Size:
		bad = &IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
			Detail: fmt.Sprintf("storage holds %d entries, but checkpoint file %s holds the checkpoint signed at size %d: %d signed entries are lost", size, l.s.cpFiles.path(l.name), pin.Size, pin.Size-size)}
	case pin != nil:
		at := l.w.root // the usual case: the file's checkpoint covers the tree
		if pin.Size != size {
			var err error
			if at, err = merkle.RootHash(pin.Size, r); err != nil {
				return nil, fmt.Errorf("root at the checkpoint file's size %d: %w", pin.Size, err)
			}
		}
		if at != pin.Root {
			bad = &IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
				Detail: fmt.Sprintf("storage holds %d entries whose root at size %d is %s, but checkpoint file %s holds the checkpoint signed at that size with root %s: storage is inconsistent with what was signed", size, pin.Size, at, l.s.cpFiles.path(l.name), pin.Root)}
		}
	}
	if bad != nil {
		// Serve only a stored checkpoint no larger than the file's: it
		// was signed before (this is not a new signature) and the tree
		// backs it.
		if stored != nil && (pin == nil || stored.Size <= pin.Size) {
			l.cp.Store(stored)
		} else {
			l.cp.Store(nil)
		}
		return bad, nil
	}
	cp := stored
	switch {
	case pin == nil && stored != nil:
		if err := l.s.cpFiles.write(l.name, stored.Note); err != nil {
			return nil, err
		}
		l.pinned = stored
		l.s.log.Info("checkpoint file created from the latest stored checkpoint", "log", l.name, "size", stored.Size, "file", l.s.cpFiles.path(l.name))
	case pin != nil && (stored == nil || stored.Size < pin.Size):
		// The tree backs the file's checkpoint but Pebble lost it from its
		// history, or never stored it (a crash while sign kept it, the
		// file written first): keep it there again.
		if err := l.s.db.Set(checkpointKey(l.id, pin.Size), pin.Note, pebble.Sync); err != nil {
			return nil, fmt.Errorf("store the checkpoint file's checkpoint: %w", err)
		}
		cp = pin
	case pin != nil && stored.Size > pin.Size:
		// Signed and stored, then a crash before its file was written: it
		// was never published. The file holds it before it is.
		if err := l.s.cpFiles.write(l.name, stored.Note); err != nil {
			return nil, err
		}
		l.pinned = stored
	}
	l.cp.Store(cp)
	return nil, nil
}

// checkFiles checks the store's logs against their checkpoint files at
// open (each log's tree was loaded and admitted by load; refused holds the
// logs admit refused). A file whose log Pebble does not hold at all is
// refused too. With WithReadOnlyOnRollback the refused logs become
// read-only (a file without a log becomes a read-only log that does not
// exist: it is not listed and cannot be created); otherwise Open fails
// with a *RollbackError naming them.
func (s *Store) checkFiles(files map[string]bool, refused map[*Log]*IntegrityError) error {
	var orphans []string
	for name := range files {
		if _, ok := s.logs[name]; !ok {
			orphans = append(orphans, name)
		}
	}
	sort.Strings(orphans)
	for _, name := range orphans {
		l := newLog(s, name, s.nextID)
		s.nextID++
		l.w.root = merkle.EmptyRoot()
		l.w.rng = merkle.NewRange()
		bad := l.readPin()
		if bad == nil && l.pinned != nil {
			bad = &IntegrityError{Log: name, Index: -1, Kind: IntegrityRollback,
				Detail: fmt.Sprintf("checkpoint file %s holds the checkpoint signed at size %d, but storage has no log %s at all", s.cpFiles.path(name), l.pinned.Size, name)}
		}
		if bad == nil { // the file vanished
			continue
		}
		s.logs[name] = l
		refused[l] = bad
	}
	var probs []*IntegrityError
	for l, e := range refused {
		s.integrity(e)
		if s.opts.readOnlyOnRollback {
			l.setReadOnly(e)
			s.log.Warn("log opened read-only: it contradicts a checkpoint it signed", "log", l.name, "detail", e.Detail)
			continue
		}
		probs = append(probs, e)
	}
	if len(probs) == 0 {
		return nil
	}
	sort.Slice(probs, func(i, j int) bool { return probs[i].Log < probs[j].Log })
	return &RollbackError{Dir: s.cpFiles.dir, Logs: probs}
}

// setReadOnly stops the log's appends and signing for good.
func (l *Log) setReadOnly(e *IntegrityError) {
	// Not %w: the log is read-only (503), the cause is reported apart.
	err := fmt.Errorf("%w: %s: %v", ErrReadOnly, l.name, e)
	l.readOnly.CompareAndSwap(nil, &err)
}

// ReadOnly returns the error appends to a read-only log get (wrapping
// ErrReadOnly, naming the integrity failure), or nil if the log is not
// read-only.
func (l *Log) ReadOnly() error {
	if p := l.readOnly.Load(); p != nil {
		return *p
	}
	return nil
}

// refusal returns why the log takes no appends: its writer failed or it is
// read-only.
func (l *Log) refusal() error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.ReadOnly()
}

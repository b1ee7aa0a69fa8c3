package ledger

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/note"

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
// (see admit and checkLog), and sign never signs below or beside it.
//
// The checkpoint dir is inside the store's directory by default, so a
// store restored from an older copy of that directory brings older files
// with it. With a guard dir (WithCheckpointGuardDir) each checkpoint is
// written a second time, at the same moment, to
// <guard dir>/<key name>+<key hash>/<log name>: a copy kept by the signing
// key rather than by the store's path, outside the directory a restore
// replaces. The larger of the two copies is the log's pin.

// maxCheckpointFile bounds what is read of a checkpoint file; a signed
// checkpoint is a few hundred bytes.
const maxCheckpointFile = 64 << 10

// WithCheckpointDir sets the directory of the checkpoint files (default
// "checkpoints" inside the store's directory). Keeping it on another disk
// or file system guards against losing both together.
func WithCheckpointDir(dir string) Option { return func(o *options) { o.checkpointDir = dir } }

// WithCheckpointGuardDir keeps a second copy of each log's latest signed
// checkpoint in dir, under a directory named for the signing key
// (<dir>/<key name>+<key hash>/<log name>; the name path-escaped), written
// with the checkpoint file and checked with it at open: a log behind or
// inconsistent with either copy is refused (or opened read-only), and two
// copies that are not one history are a fork (IntegrityFork). Keep dir
// outside the store's directory, so that restoring that directory from an
// older copy (to any path) does not roll the guard back with it; every
// store signed by one key on the host is then checked against the latest
// checkpoint the key signed. Default "": no guard copy.
func WithCheckpointGuardDir(dir string) Option {
	return func(o *options) { o.checkpointGuardDir = dir }
}

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
	Dir   string            // the checkpoint files' directory
	Guard string            // the key's guard directory, or "" without one
	Logs  []*IntegrityError // one per log, in name order
}

func (e *RollbackError) Error() string {
	var b strings.Builder
	names := make([]string, len(e.Logs))
	for i, p := range e.Logs {
		names[i] = p.Log
	}
	where := e.Dir
	if e.Guard != "" {
		where += " and " + e.Guard
	}
	fmt.Fprintf(&b, "ledger: refusing to open: log %s contradicts the signed checkpoint kept in %s:", strings.Join(names, ", "), where)
	for _, p := range e.Logs {
		fmt.Fprintf(&b, " %s: %s;", p.Log, p.Detail)
	}
	b.WriteString(" signing on would fork the log. Restore the data directory from a backup (or a replica) that holds the signed entries " +
		"(an older backup is refused the same way), or open the logs read-only as they are (auditd serve --rollback-read-only, " +
		"or rollback_read_only: true in the config file) to serve what is left; see docs/operations.md, \"log refused at start\"")
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

// checkpointFiles are the directories that keep each log's latest signed
// checkpoint: the checkpoint dir and, with a guard, the key's guard dir.
type checkpointFiles struct {
	dir   string
	guard string // <guard dir>/<key name>+<key hash>, or "" without a guard
	// beforeWrite, if set, runs before each write of a checkpoint (both
	// copies): tests stall the disk with it.
	beforeWrite func(log string)
}

// newCheckpointFiles returns the checkpoint files of the store in dir,
// signed by the key of v, as the options place them.
func newCheckpointFiles(dir string, o *options, v note.Verifier) checkpointFiles {
	c := checkpointFiles{dir: o.checkpointDir}
	if c.dir == "" {
		c.dir = filepath.Join(dir, "checkpoints")
	}
	if o.checkpointGuardDir != "" {
		c.guard = filepath.Join(o.checkpointGuardDir, GuardKeyDir(v))
	}
	return c
}

// GuardKeyDir is the name of the directory, under a guard dir, that holds
// the guard copies of the checkpoints signed by the key of v:
// "<key name>+<key hash>" (the hash in 8 hex digits, the name path-escaped),
// as the key's verifier key begins.
func GuardKeyDir(v note.Verifier) string {
	return fmt.Sprintf("%s+%08x", url.PathEscape(v.Name()), v.KeyHash())
}

// A pinDir is one of the directories that keep a copy of each log's
// checkpoint; what names its copies in messages.
type pinDir struct{ what, dir string }

func (c checkpointFiles) dirs() []pinDir {
	ds := []pinDir{{"checkpoint file", c.dir}}
	if c.guard != "" {
		ds = append(ds, pinDir{"guard copy", c.guard})
	}
	return ds
}

func (c checkpointFiles) path(log string) string { return filepath.Join(c.dir, log) }

// list creates the directories if needed, removes temporary files a crash
// left, and returns the names of the logs that have a copy in either.
func (c checkpointFiles) list(s *Store) (map[string]bool, error) {
	names := map[string]bool{}
	for _, d := range c.dirs() {
		if err := durable.MkdirAll(d.dir, 0o700); err != nil {
			return nil, fmt.Errorf("ledger: %s directory %s: %w", d.what, d.dir, err)
		}
		removed, err := durable.RemoveTemp(d.dir)
		if err != nil {
			return nil, fmt.Errorf("ledger: %s directory %s: %w", d.what, d.dir, err)
		}
		if len(removed) > 0 {
			s.log.Info("removed temporary checkpoint files left by a crash", "dir", d.dir, "files", removed)
		}
		if err := c.names(d.dir, names, s.log.Warn); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// listExisting returns the names of the logs that have a copy in either
// directory, writing nothing: a directory that does not exist holds none,
// temporary files are skipped.
func (c checkpointFiles) listExisting() (map[string]bool, error) {
	names := map[string]bool{}
	for _, d := range c.dirs() {
		if err := c.names(d.dir, names, nil); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return names, nil
}

// names adds the log names of the files in dir to names; warn, if set, is
// told of files that cannot be a log's.
func (c checkpointFiles) names(dir string, names map[string]bool, warn func(string, ...any)) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("ledger: checkpoint files: %w", err)
	}
	for _, e := range ents {
		if durable.IsTemp(e.Name()) && !e.IsDir() {
			continue
		}
		if !ValidLogName(e.Name()) || e.IsDir() {
			if warn != nil {
				warn("ignoring a file that cannot be a log's checkpoint file", "dir", dir, "file", e.Name())
			}
			continue
		}
		names[e.Name()] = true
	}
	return nil
}

// read reads the log's copies: its checkpoint file, then its guard copy.
func (c checkpointFiles) read(log string) []pinCopy {
	var out []pinCopy
	for _, d := range c.dirs() {
		p := pinCopy{what: d.what, path: filepath.Join(d.dir, log)}
		p.note, p.err = readCheckpointFile(p.path)
		if errors.Is(p.err, os.ErrNotExist) {
			p.note, p.err = nil, nil
		}
		out = append(out, p)
	}
	return out
}

// readCheckpointFile returns the file at path, or an error wrapping
// os.ErrNotExist if there is none.
func readCheckpointFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCheckpointFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxCheckpointFile)
	}
	if b == nil {
		b = []byte{} // empty, not missing
	}
	return b, nil
}

// write writes note to the log's checkpoint file and its guard copy, at
// once: checkpoint latency is the slower of the two, not their sum.
func (c checkpointFiles) write(log string, note []byte) error {
	if c.beforeWrite != nil {
		c.beforeWrite(log)
	}
	ds := c.dirs()
	if len(ds) == 1 {
		return c.writeTo(ds[0], log, note)
	}
	guardErr := make(chan error, 1)
	go func() { guardErr <- c.writeTo(ds[1], log, note) }()
	err := c.writeTo(ds[0], log, note)
	if gerr := <-guardErr; err == nil {
		err = gerr
	}
	return err
}

func (c checkpointFiles) writeTo(d pinDir, log string, note []byte) error {
	if err := durable.WriteFile(filepath.Join(d.dir, log), note, 0o600); err != nil {
		return fmt.Errorf("ledger: %s: write %s: %w", log, d.what, err)
	}
	return nil
}

// admit checks the loaded tree against the log's checkpoint copies (its
// file and guard copy) and its latest stored checkpoint, with checkLog,
// and publishes the latest checkpoint; r reads the stored tree. It
// returns the integrity failure that makes the log refused or read-only
// (see checkLog), or an error that fails the open: the latest stored
// checkpoint does not verify or does not match the tree.
//
// Otherwise each copy is brought up to the checkpoint published (or
// created from it: a log from before checkpoint files, a new guard dir)
// and a copy newer than anything stored is stored again, before the
// checkpoint is published.
func (l *Log) admit(r merkle.HashReader) (*IntegrityError, error) {
	stored, err := latestCheckpointNote(l.s.db, l.id)
	if err != nil {
		return nil, err
	}
	v, err := checkLog(&logCheck{name: l.name, origin: l.Origin(), v: l.s.verifier, held: true,
		size: l.w.size, root: l.w.root, r: r, stored: stored, copies: l.s.cpFiles.read(l.name)})
	if err != nil {
		return nil, err
	}
	if v.fatal != nil {
		return nil, errors.New(v.fatal.Detail)
	}
	l.signer.pinned = v.pin
	if v.bad != nil {
		l.cp.Store(v.publish)
		return v.bad, nil
	}
	if v.storePin {
		// The tree backs the copy's checkpoint but Pebble lost it from
		// its history, or never stored it (a crash while sign kept it,
		// the file written first): keep it there again.
		if err := l.s.db.Set(checkpointKey(l.id, v.publish.Size), v.publish.Note, pebble.Sync); err != nil {
			return nil, fmt.Errorf("store the checkpoint file's checkpoint: %w", err)
		}
	}
	for _, p := range v.stale {
		// Signed and stored, then a crash before this copy was written
		// (it was never published); or a copy missing or behind: a store
		// from before checkpoint files, a new or restored guard dir. The
		// copy holds the checkpoint before it is published.
		if err := l.s.cpFiles.writeTo(pinDir{p.what, filepath.Dir(p.path)}, l.name, v.publish.Note); err != nil {
			return nil, err
		}
		from := "the latest stored checkpoint"
		if !v.fromStored {
			from = "the " + v.pinWhat
		}
		if p.note == nil {
			l.s.log.Info(p.what+" created from "+from, "log", l.name, "size", v.publish.Size, "file", p.path)
		} else {
			l.s.log.Info(p.what+" brought up to "+from, "log", l.name, "size", v.publish.Size, "file", p.path)
		}
	}
	l.signer.pinned = v.publish
	l.cp.Store(v.publish)
	return nil, nil
}

// checkFiles checks the store's logs against their checkpoint files at
// open (each log's tree was loaded and admitted by load; refused holds the
// logs admit refused). A file (or guard copy) whose log Pebble does not
// hold at all is refused too. With WithReadOnlyOnRollback the refused logs
// become read-only (a file without a log becomes a read-only log that does
// not exist: it is not listed and cannot be created); otherwise Open fails
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
		v, err := checkLog(&logCheck{name: name, origin: s.Origin(name), v: s.verifier, copies: s.cpFiles.read(name)})
		if err != nil {
			return err
		}
		if v.bad == nil { // the files vanished
			continue
		}
		l := newLog(s, name, s.nextID)
		s.nextID++
		l.signer.pinned = v.pin
		s.logs[name] = l
		refused[l] = v.bad
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
	return &RollbackError{Dir: s.cpFiles.dir, Guard: s.cpFiles.guard, Logs: probs}
}

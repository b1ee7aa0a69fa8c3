package ledger

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/merkle"
)

// This file holds the checks Open runs on each log's checkpoints at start,
// as one function (checkLog) that judges and writes nothing: Open acts on
// its verdict (admit, checkFiles) and RawStore.CheckOpen, which auditd fsck
// runs on a stopped daemon's store, reports it. So fsck passes exactly the
// stores Open opens.

// logCheck is what checkLog judges of one log.
type logCheck struct {
	name, origin string
	v            note.Verifier
	// held is whether storage holds the log; if it does, size and root
	// are its tree and r reads the tree's hashes.
	held   bool
	size   uint64
	root   merkle.Hash
	r      merkle.HashReader
	stored []byte    // the latest stored checkpoint note, or nil
	copies []pinCopy // the checkpoint file, then the guard copy
}

// pinCopy is one copy of a log's latest signed checkpoint kept outside
// Pebble: its checkpoint file or its guard copy.
type pinCopy struct {
	what, path string // "checkpoint file" or "guard copy", and its path
	note       []byte // as read; nil if there is no such file
	err        error  // reading it failed
	cp         *SignedCheckpoint
}

// logVerdict is checkLog's judgement of one log.
type logVerdict struct {
	// fatal, if set, fails Open: the latest stored checkpoint does not
	// verify with the key, or does not match the tree.
	fatal *IntegrityError
	// bad, if set, refuses the log (or opens it read-only): a copy that
	// does not verify, a tree behind or inconsistent with the pin, or two
	// copies that are not one history.
	bad *IntegrityError
	// pin is the larger of the copies that verify; pinWhat names the copy.
	pin     *SignedCheckpoint
	pinWhat string
	// publish is the checkpoint to serve: the latest stored, or the pin
	// if that is newer (storePin: store it again); with bad set, a stored
	// checkpoint no larger than the pin, or nil.
	publish    *SignedCheckpoint
	fromStored bool
	storePin   bool
	// stale are the copies missing or behind publish, to be written.
	stale []pinCopy
}

// checkLog judges a log's checkpoints at open, reading tree hashes through
// c.r and writing nothing:
//
//   - the latest stored checkpoint verifies with the key and origin and
//     matches the tree (fatal otherwise: Open fails, naming the log);
//   - each copy that exists verifies (IntegrityCheckpointBad);
//   - two copies of one size hold one root, and the tree, where it backs
//     the larger copy, backs the smaller too (IntegrityFork: the key
//     signed two histories);
//   - the tree is not smaller than the larger copy's checkpoint (the
//     pin), and its root at the pin's size is the pin's; a log storage
//     does not hold has no copy (IntegrityRollback).
//
// An error is storage that could not be read.
func checkLog(c *logCheck) (logVerdict, error) {
	var v logVerdict
	rootAt := func(size uint64) (merkle.Hash, error) {
		if size == c.size {
			return c.root, nil
		}
		at, err := merkle.RootHash(size, c.r)
		if err != nil {
			return at, fmt.Errorf("ledger: %s: root at size %d: %w", c.name, size, err)
		}
		return at, nil
	}
	fail := func(kind, format string, a ...any) *IntegrityError {
		return &IntegrityError{Log: c.name, Index: -1, Kind: kind, Detail: fmt.Sprintf(format, a...)}
	}
	var stored *SignedCheckpoint
	if c.stored != nil {
		cp, err := merkle.OpenCheckpoint(c.stored, c.v, c.origin)
		if err != nil {
			v.fatal = fail(IntegrityCheckpointBad, "stored checkpoint: %v: the latest checkpoint stored for the log does not verify with the key %s+%08x for origin %s (a data directory of another key, or a damaged checkpoint)", err, c.v.Name(), c.v.KeyHash(), c.origin)
			return v, nil
		}
		if cp.Size > c.size {
			v.fatal = fail(IntegrityRootMismatch, "checkpoint at size %d is beyond the stored tree of size %d", cp.Size, c.size)
			return v, nil
		}
		at, err := rootAt(cp.Size)
		if err != nil {
			return v, err
		}
		if at != cp.Root {
			v.fatal = fail(IntegrityRootMismatch, "latest checkpoint (size %d, root %s) does not match the stored tree (root %s)", cp.Size, cp.Root, at)
			return v, nil
		}
		stored = &SignedCheckpoint{Checkpoint: cp, Note: c.stored}
	}

	// The copies, larger first (the checkpoint file first of equals).
	var good []*pinCopy
	for i := range c.copies {
		p := &c.copies[i]
		p.cp = nil
		if p.note == nil && p.err == nil {
			continue
		}
		err := p.err
		if err == nil && stored != nil && bytes.Equal(p.note, stored.Note) {
			// The usual copy: the latest stored checkpoint, just verified
			// (a second signature check was half of a restart's time).
			p.cp = stored
			good = append(good, p)
			continue
		}
		if err == nil {
			var cp merkle.Checkpoint
			if cp, err = merkle.OpenCheckpoint(p.note, c.v, c.origin); err == nil {
				p.cp = &SignedCheckpoint{Checkpoint: cp, Note: p.note}
				good = append(good, p)
				continue
			}
		}
		if v.bad == nil {
			v.bad = fail(IntegrityCheckpointBad, "%s %s does not hold a checkpoint of this log signed by this key (%v); if storage is known to be intact, remove the file and it is rebuilt from the latest stored checkpoint", p.what, p.path, err)
		}
	}
	sort.SliceStable(good, func(i, j int) bool { return good[i].cp.Size > good[j].cp.Size })
	var pin *SignedCheckpoint
	where, holds := "", "holds"
	if len(good) > 0 {
		pin = good[0].cp
		v.pin, v.pinWhat = pin, good[0].what
		var at []string
		for _, p := range good {
			if p.cp.Size == pin.Size && p.cp.Root == pin.Root {
				at = append(at, p.what+" "+p.path)
			}
		}
		where = strings.Join(at, " and ")
		if len(at) > 1 {
			holds = "hold"
		}
	}
	if v.bad == nil {
		for _, p := range good[min(1, len(good)):] {
			if p.cp.Size == pin.Size && p.cp.Root != pin.Root {
				v.bad = fail(IntegrityFork, "%s %s and %s %s hold two checkpoints signed at size %d with different roots (%s and %s): this key signed two histories of the log (docs/runbook.md, \"Fork evidence\")", good[0].what, good[0].path, p.what, p.path, pin.Size, pin.Root, p.cp.Root)
				break
			}
		}
	}
	if v.bad == nil && pin != nil {
		switch {
		case !c.held:
			v.bad = fail(IntegrityRollback, "%s %s the checkpoint signed at size %d, but storage has no log %s at all", where, holds, pin.Size, c.name)
		case c.size < pin.Size:
			lost := plural.N(pin.Size-c.size, "signed entry is", "signed entries are")
			v.bad = fail(IntegrityRollback, "storage holds %s, but %s %s the checkpoint signed at size %d: %s lost", plural.N(c.size, "entry", "entries"), where, holds, pin.Size, lost)
		default:
			at, err := rootAt(pin.Size)
			if err != nil {
				return v, err
			}
			if at != pin.Root {
				v.bad = fail(IntegrityRollback, "storage holds %d entries whose root at size %d is %s, but %s %s the checkpoint signed at that size with root %s: storage is inconsistent with what was signed", c.size, pin.Size, at, where, holds, pin.Root)
			}
		}
	}
	if v.bad == nil {
		// The tree backs the pin; a smaller copy it does not back is of
		// another history.
		for _, p := range good[min(1, len(good)):] {
			if p.cp.Size == pin.Size {
				continue
			}
			at, err := rootAt(p.cp.Size)
			if err != nil {
				return v, err
			}
			if at != p.cp.Root {
				v.bad = fail(IntegrityFork, "%s %s holds the checkpoint signed at size %d with root %s, but the tree, which matches the checkpoint signed at size %d in %s, has root %s at that size: this key signed two histories of the log (docs/runbook.md, \"Fork evidence\")", p.what, p.path, p.cp.Size, p.cp.Root, pin.Size, where, at)
				break
			}
		}
	}
	if v.bad != nil {
		// Serve only a stored checkpoint no larger than the pin: it was
		// signed before (this is not a new signature) and the tree backs
		// it.
		if stored != nil && (pin == nil || stored.Size <= pin.Size) {
			v.publish, v.fromStored = stored, true
		}
		return v, nil
	}
	v.publish, v.fromStored = stored, stored != nil
	if pin != nil && (stored == nil || stored.Size < pin.Size) {
		v.publish, v.fromStored, v.storePin = pin, false, true
	}
	if v.publish != nil {
		for _, p := range c.copies {
			if p.cp == nil || p.cp.Size < v.publish.Size {
				v.stale = append(v.stale, p)
			}
		}
	}
	return v, nil
}

// latestCheckpointNote returns the latest checkpoint note stored for the
// log with id, or nil if there is none.
func latestCheckpointNote(r pebble.Reader, id uint32) ([]byte, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: checkpointKey(id, 0), UpperBound: logKey(kindCheckpoint, id+1, 0)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if !it.Last() {
		return nil, it.Error()
	}
	return bytes.Clone(it.Value()), nil
}

// readLayout returns the storage layout the store's marker records (0
// without a marker, or with one of the wrong length), or an error if that
// is newer than this code's: Open refuses such a store.
func readLayout(r pebble.Reader) (uint32, error) {
	v, closer, err := r.Get([]byte{kindLayout})
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	have := uint32(0)
	if len(v) == 4 {
		have = binary.BigEndian.Uint32(v)
	}
	if have > storageLayout {
		return have, fmt.Errorf("storage layout %d is newer than this version's %d", have, storageLayout)
	}
	return have, nil
}

// OpenChecks is what CheckOpen found: why Open would refuse the store, or
// open logs of it only read-only.
type OpenChecks struct {
	// Layout, if not nil, is why Open refuses the whole store: its storage
	// layout is newer than this version's.
	Layout error
	// Logs holds one failure per log, in name order: a log Open refuses
	// (or opens read-only with WithReadOnlyOnRollback): kinds
	// IntegrityRollback, IntegrityCheckpointBad, IntegrityFork; or one
	// whose latest stored checkpoint fails Open (IntegrityCheckpointBad:
	// it does not verify with the key, a store of another key;
	// IntegrityRootMismatch: it does not match the tree).
	Logs []*IntegrityError
}

// CheckOpen runs the checks Open runs at start on the store's layout and
// on each log's checkpoints, with Open's code, and writes nothing: each
// log's checkpoint file and guard copy against its tree and its latest
// stored checkpoint, the copies of logs storage does not hold, the latest
// stored checkpoint against v (the key the daemon signs with) and the
// tree. Of opts, WithCheckpointDir and WithCheckpointGuardDir apply, as
// the daemon gives them to Open. The tiles and entries themselves are the
// scrub's to check. An error is storage that could not be read.
func (s *RawStore) CheckOpen(v note.Verifier, opts ...Option) (OpenChecks, error) {
	var out OpenChecks
	var o options
	for _, f := range opts {
		f(&o)
	}
	if _, err := readLayout(s.db); err != nil {
		out.Layout = err
	}
	files := newCheckpointFiles(s.dir, &o, v)
	names, err := files.listExisting()
	if err != nil {
		return out, err
	}
	logs, err := s.Logs()
	if err != nil {
		return out, err
	}
	for _, name := range logs {
		delete(names, name)
		l, err := s.Log(name)
		if err != nil {
			return out, err
		}
		stored, err := latestCheckpointNote(s.db, l.id)
		if err != nil {
			l.Close()
			return out, fmt.Errorf("ledger: %s: latest stored checkpoint: %w", name, err)
		}
		vd, err := checkLog(&logCheck{name: name, origin: v.Name() + "/" + name, v: v, held: true,
			size: l.Size(), root: l.Root(), r: l.HashReader(), stored: stored, copies: files.read(name)})
		l.Close()
		if err != nil {
			return out, err
		}
		if e := cmp.Or(vd.fatal, vd.bad); e != nil {
			out.Logs = append(out.Logs, e)
		}
	}
	for name := range names {
		vd, err := checkLog(&logCheck{name: name, origin: v.Name() + "/" + name, v: v, copies: files.read(name)})
		if err != nil {
			return out, err
		}
		if vd.bad != nil {
			out.Logs = append(out.Logs, vd.bad)
		}
	}
	sort.Slice(out.Logs, func(i, j int) bool { return out.Logs[i].Log < out.Logs[j].Log })
	return out, nil
}

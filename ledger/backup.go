package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/internal/durable"
)

// Snapshot is a consistent copy of a running store, taken by
// Store.Snapshot for a backup.
type Snapshot struct {
	// Dir holds the copy of the database (Pebble's files): Open opens it
	// as the store was at one instant, every append acknowledged before
	// Snapshot was called included.
	Dir string
	// Checkpoints are the logs' checkpoint files (signed notes), by log,
	// as they were before the copy was taken: the copy holds every entry
	// each one covers, so a store opened from Dir with these files in its
	// checkpoint dir is never behind them.
	Checkpoints map[string][]byte
}

// Logs returns the names of the logs that have a checkpoint file in the
// snapshot, sorted.
func (s *Snapshot) Logs() []string {
	out := make([]string, 0, len(s.Checkpoints))
	for name := range s.Checkpoints {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Snapshot copies the store into dir, which must not exist, while it
// serves: appends and checkpoints go on meanwhile. The checkpoint files
// are read first and the database copied after, so that no file in the
// snapshot is ahead of the entries in it (a checkpoint is signed, and its
// file written, only once its entries are in the database). The copy of
// the database hard-links its immutable files when dir is on the data
// dir's file system and copies them otherwise; the WAL is synced and
// copied, so every append acknowledged before the call is in it.
//
// The caller removes dir when done with it.
func (s *Store) Snapshot(dir string) (*Snapshot, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.wg.Add(1) // Close waits for the copy before closing the database
	s.mu.Unlock()
	defer s.wg.Done()

	cps := map[string][]byte{}
	ents, err := os.ReadDir(s.cpFiles.dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("ledger: snapshot: checkpoint files: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() || durable.IsTemp(e.Name()) || !ValidLogName(e.Name()) {
			continue
		}
		b, err := readCheckpointFile(filepath.Join(s.cpFiles.dir, e.Name()))
		if os.IsNotExist(err) {
			continue // a log being removed; its entries are not signed
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot: checkpoint file: %w", err)
		}
		cps[e.Name()] = b
	}
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return nil, fmt.Errorf("ledger: snapshot into %s: %w", dir, err)
	}
	return &Snapshot{Dir: dir, Checkpoints: cps}, nil
}

package checkers

import (
	"context"
	"errors"
	"fmt"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Source is where the scrub and the checkpoint audit read logs from: a
// local store (a live *ledger.Store, or a *ledger.RawStore opened for
// fsck) or a remote auditd (its HTTP API). Like Tessera's fsck Fetcher, it
// hands out stored data as it is and leaves every judgement to the checker.
type Source interface {
	// Logs lists the logs to check.
	Logs(ctx context.Context) ([]string, error)
	// Log opens one log for one pass; the caller closes it.
	Log(ctx context.Context, name string) (LogSource, error)
}

// LogSource is one log's stored data, as of one moment where the source
// can (a local log is read from one Pebble snapshot).
type LogSource interface {
	// Size is the tree size the log claims: its recorded size (local) or
	// its latest verified checkpoint's (remote).
	Size() uint64
	// Root is the root the log claims for Size.
	Root() merkle.Hash
	// Leaves calls fn with the entries [0, Size()) in index order, in
	// batches, each with its leaf hash recomputed from the entry as stored
	// or served, never taken from a tile. An entry that is missing or does
	// not decode is passed with its Err set; the scan goes on. An error
	// from fn stops it. It returns what the source found in its own
	// storage on the way, which no tile API serves (a local store's
	// ledger.RawLog.Check; a remote log finds nothing), also when it
	// returns an error.
	Leaves(ctx context.Context, fn func([]ledger.ScannedEntry) error) ([]Finding, error)
	// Tile returns the first width base hashes of the stored tile
	// level/n and, where the source keeps them, its level-4 hashes (nil
	// otherwise). A tile not stored is ErrTileMissing; a source may return
	// more base hashes than width.
	Tile(ctx context.Context, level uint8, n uint64, width int) (base, mid []merkle.Hash, err error)
	// Checkpoints returns every stored signed checkpoint note with the size
	// it is filed under, oldest first, unparsed.
	Checkpoints(ctx context.Context) ([]ledger.RawCheckpoint, error)
	// ConsistencyProof proves the tree of size to extends the tree of size
	// from, from the log's stored tree (as its API serves it).
	ConsistencyProof(ctx context.Context, from, to uint64) ([]merkle.Hash, error)
	Close() error
}

// ErrTileMissing reports a tile the tree needs that the source does not
// hold.
var ErrTileMissing = errors.New("checkers: tile missing")

// StoreSource reads the logs of a live store, each over a Pebble snapshot.
func StoreSource(s *ledger.Store) Source { return storeSource{s} }

type storeSource struct{ s *ledger.Store }

func (s storeSource) Logs(context.Context) ([]string, error) {
	var out []string
	for _, l := range s.s.Logs() {
		out = append(out, l.Name)
	}
	return out, nil
}

func (s storeSource) Log(_ context.Context, name string) (LogSource, error) {
	l, err := s.s.Log(name)
	if err != nil {
		return nil, err
	}
	r, err := l.Raw()
	if err != nil {
		return nil, err
	}
	return rawLogSource{r}, nil
}

// RawSource reads the logs of a store opened with ledger.OpenRaw (fsck).
func RawSource(s *ledger.RawStore) Source { return rawSource{s} }

type rawSource struct{ s *ledger.RawStore }

func (s rawSource) Logs(context.Context) ([]string, error) { return s.s.Logs() }

func (s rawSource) Log(_ context.Context, name string) (LogSource, error) {
	r, err := s.s.Log(name)
	if err != nil {
		return nil, err
	}
	return rawLogSource{r}, nil
}

// rawLogSource is a LogSource over a *ledger.RawLog.
type rawLogSource struct{ r *ledger.RawLog }

var _ LogSource = rawLogSource{}

func (s rawLogSource) Size() uint64      { return s.r.Size() }
func (s rawLogSource) Root() merkle.Hash { return s.r.Root() }
func (s rawLogSource) Close() error      { return s.r.Close() }

func (s rawLogSource) Leaves(ctx context.Context, fn func([]ledger.ScannedEntry) error) ([]Finding, error) {
	found, err := s.r.Check(ctx, fn)
	out := make([]Finding, 0, len(found))
	for _, f := range found {
		fd := Finding{Kind: f.Kind, Detail: f.Detail}
		if f.Index >= 0 {
			fd.Index = At(uint64(f.Index))
		}
		out = append(out, fd)
	}
	return out, err
}

func (s rawLogSource) Tile(_ context.Context, level uint8, n uint64, _ int) (base, mid []merkle.Hash, err error) {
	base, mid, err = s.r.Tile(level, n)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: %d/%d", ErrTileMissing, level, n)
	}
	return base, mid, err
}

func (s rawLogSource) Checkpoints(context.Context) ([]ledger.RawCheckpoint, error) {
	return s.r.Checkpoints()
}

func (s rawLogSource) ConsistencyProof(_ context.Context, from, to uint64) ([]merkle.Hash, error) {
	return merkle.ProveConsistency(from, to, s.r.HashReader())
}

// OnlyLog restricts src to the named log.
func OnlyLog(src Source, name string) Source { return onlyLog{src, name} }

type onlyLog struct {
	Source
	name string
}

func (o onlyLog) Logs(context.Context) ([]string, error) { return []string{o.name}, nil }

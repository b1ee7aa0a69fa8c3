package checkers

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// RemoteSource reads logs from an auditd server through its API: the
// latest checkpoint (verified by the client's key; the log is checked up to
// its size), entries (each leaf rebuilt from the entry's fields), C2SP
// tiles (base hashes only: the API serves no level-4 hashes, so the scrub
// cannot tell a bad entry from a bad tile and reports leaf_mismatch), the
// checkpoint history and consistency proofs.
func RemoteSource(c *client.Client) Source { return remoteSource{c} }

type remoteSource struct{ c *client.Client }

func (s remoteSource) Logs(ctx context.Context) ([]string, error) { return s.c.Logs(ctx) }

func (s remoteSource) Log(ctx context.Context, name string) (LogSource, error) {
	cp, _, err := s.c.Checkpoint(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("latest checkpoint: %w", err)
	}
	return &remoteLog{c: s.c, name: name, size: cp.Size, root: cp.Root}, nil
}

type remoteLog struct {
	c    *client.Client
	name string
	size uint64
	root merkle.Hash
}

var _ LogSource = (*remoteLog)(nil)

// remotePage is the entries asked for at once (the API's limit).
const remotePage = 10_000

func (r *remoteLog) Size() uint64      { return r.size }
func (r *remoteLog) Root() merkle.Hash { return r.root }
func (r *remoteLog) Close() error      { return nil }

func (r *remoteLog) Leaves(ctx context.Context, fn func([]ledger.ScannedEntry) error) ([]Finding, error) {
	batch := make([]ledger.ScannedEntry, 0, remotePage)
	for next := uint64(0); next < r.size; {
		end := min(next+remotePage, r.size)
		batch = batch[:0]
		es, err := r.c.Entries(ctx, r.name, next, end)
		if err == nil && len(es) > 0 {
			for i := range es {
				batch = append(batch, r.scanned(&es[i]))
			}
		} else {
			// One entry the server cannot serve fails the page: read its
			// entries one by one and report those it does not give.
			if batch, err = r.oneByOne(ctx, batch, next, end); err != nil {
				return nil, err
			}
		}
		next += uint64(len(batch))
		if err := fn(batch); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// scanned rebuilds the entry's leaf from its fields.
func (r *remoteLog) scanned(e *client.Entry) ledger.ScannedEntry {
	s := ledger.ScannedEntry{Index: e.Index}
	h, err := e.RecomputeLeaf(r.name)
	if err != nil {
		s.Err = &ledger.IntegrityError{Log: r.name, Index: int64(e.Index), Kind: ledger.IntegrityLeafMismatch, Detail: err.Error()}
	} else {
		s.LeafHash = h
	}
	return s
}

// oneByOne appends the entries [from, to) read one at a time. An entry the
// server answers with an error is reported missing; an error reaching the
// server stops the scan.
func (r *remoteLog) oneByOne(ctx context.Context, out []ledger.ScannedEntry, from, to uint64) ([]ledger.ScannedEntry, error) {
	for i := from; i < to; i++ {
		e, err := r.c.Entry(ctx, r.name, i)
		var ue *url.Error
		missing := ""
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &ue):
			return nil, fmt.Errorf("entry %d: %w", i, err)
		case err != nil:
			missing = "the server does not serve it: " + err.Error()
		case e.Index != i:
			missing = fmt.Sprintf("the server sent entry %d for %d", e.Index, i)
		}
		if missing != "" {
			out = append(out, ledger.ScannedEntry{Index: i, Err: &ledger.IntegrityError{Log: r.name, Index: int64(i), Kind: ledger.IntegrityEntryMissing, Detail: missing}})
			continue
		}
		out = append(out, r.scanned(e))
	}
	return out, nil
}

func (r *remoteLog) Tile(ctx context.Context, level uint8, n uint64, width int) (base, mid []merkle.Hash, err error) {
	base, err = r.c.Tile(ctx, r.name, level, n, width)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: %d/%d: %v", ErrTileMissing, level, n, err)
	}
	return base, nil, err
}

func (r *remoteLog) Checkpoints(ctx context.Context) ([]ledger.RawCheckpoint, error) {
	var out []ledger.RawCheckpoint
	for from := uint64(0); ; {
		page, err := r.c.Checkpoints(ctx, r.name, from, 1000)
		if err != nil {
			return nil, err
		}
		for _, c := range page {
			// Those signed since the latest was read are for the next pass.
			if c.Size <= r.size {
				out = append(out, ledger.RawCheckpoint{Size: c.Size, Note: []byte(c.Note)})
			}
		}
		if len(page) < 1000 {
			return out, nil
		}
		from = page[len(page)-1].Size + 1
	}
}

func (r *remoteLog) ConsistencyProof(ctx context.Context, from, to uint64) ([]merkle.Hash, error) {
	return r.c.ConsistencyProof(ctx, r.name, from, to)
}

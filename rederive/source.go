package rederive

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Ledger is where a run reads its source logs: the local store
// (LocalLedger) or a remote auditd whose every answer is verified
// (RemoteLedger).
type Ledger interface {
	// Logs lists the log names.
	Logs(ctx context.Context) ([]string, error)
	// Pin returns the latest signed checkpoint of log, or ok false if the
	// log has none yet.
	Pin(ctx context.Context, log string) (p Pin, ok bool, err error)
	// Reader reads log up to the pinned size. Reading [0, p.Size) in full
	// checks the entries against the pin; an entry that does not check out
	// is an error wrapping ErrVerification.
	Reader(log string, p Pin) LogReader
	// Prove returns the inclusion proof of entry index of log in the tree
	// of the pin's size, checked against the pin's root.
	Prove(ctx context.Context, log string, index uint64, p Pin) ([]merkle.Hash, error)
}

// ErrVerification reports ledger data that did not check out against a
// signed checkpoint: a signature, a leaf, a root or a proof.
var ErrVerification = errors.New("rederive: ledger verification failed")

// matchLogs returns the logs matching any of the patterns, sorted.
func matchLogs(logs, patterns []string) []string {
	var out []string
	for _, l := range logs {
		for _, p := range patterns {
			if ok, _ := path.Match(p, l); ok || p == l {
				out = append(out, l)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// LocalLedger reads the ledger in this process.
type LocalLedger struct{ Store *ledger.Store }

var _ Ledger = LocalLedger{}

func (s LocalLedger) Logs(context.Context) ([]string, error) {
	var out []string
	for _, li := range s.Store.Logs() {
		out = append(out, li.Name)
	}
	return out, nil
}

func (s LocalLedger) Pin(_ context.Context, log string) (Pin, bool, error) {
	l, err := s.Store.Log(log)
	if err != nil {
		return Pin{}, false, err
	}
	cp := l.Checkpoint()
	if cp == nil {
		return Pin{}, false, nil
	}
	return Pin{Log: log, Size: cp.Size, Root: cp.Root, Checkpoint: string(cp.Note)}, true, nil
}

func (s LocalLedger) Reader(log string, _ Pin) LogReader {
	l, err := s.Store.Log(log)
	if err != nil {
		return errReader{log, err}
	}
	return LocalLog(l)
}

func (s LocalLedger) Prove(_ context.Context, log string, index uint64, p Pin) ([]merkle.Hash, error) {
	l, err := s.Store.Log(log)
	if err != nil {
		return nil, err
	}
	h, proof, err := l.LeafInclusion(index, p.Size)
	if err != nil {
		return nil, err
	}
	if err := merkle.VerifyInclusion(index, p.Size, h, proof, p.Root); err != nil {
		return nil, fmt.Errorf("%w: %s entry %d: %v", ErrVerification, log, index, err)
	}
	return proof, nil
}

type errReader struct {
	name string
	err  error
}

func (r errReader) Name() string { return r.name }
func (r errReader) Entries(context.Context, uint64, uint64, func(*ledger.Record) error) error {
	return r.err
}

// RemoteLedger reads a remote auditd over HTTP and trusts nothing it did
// not check: checkpoints are verified with the verifier key, every entry's
// leaf is recomputed from its fields, and the leaves read are hashed into a
// tree whose root must match the pinned checkpoint (through a consistency
// proof when the read stops short of it).
type RemoteLedger struct {
	Client *client.Client
	// PageSize is the entries fetched per request (default 1000).
	PageSize uint64
}

var _ Ledger = (*RemoteLedger)(nil)

func (r *RemoteLedger) Logs(ctx context.Context) ([]string, error) { return r.Client.Logs(ctx) }

func (r *RemoteLedger) Pin(ctx context.Context, log string) (Pin, bool, error) {
	cp, note, err := r.Client.Checkpoint(ctx, log)
	if errors.Is(err, client.ErrVerification) {
		return Pin{}, false, fmt.Errorf("%w: %v", ErrVerification, err)
	}
	if err != nil {
		// A log signs its first checkpoint after its first append: an
		// empty log has none yet, which is no error (as for LocalLedger).
		// Trusting the server that it is empty is no weaker than trusting
		// its list of logs.
		if es, eerr := r.Client.Entries(ctx, log, 0, 1); eerr == nil && len(es) == 0 {
			return Pin{}, false, nil
		}
		return Pin{}, false, err
	}
	return Pin{Log: log, Size: cp.Size, Root: cp.Root, Checkpoint: string(note)}, true, nil
}

func (r *RemoteLedger) Reader(log string, p Pin) LogReader {
	return &remoteLog{r: r, name: log, pin: p}
}

func (r *RemoteLedger) Prove(ctx context.Context, log string, index uint64, p Pin) ([]merkle.Hash, error) {
	e, err := r.Client.Entry(ctx, log, index)
	if err != nil {
		return nil, err
	}
	_, _, h, err := e.Decode(log)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrVerification, err)
	}
	proof, err := r.Client.InclusionProof(ctx, log, index, p.Size)
	if err != nil {
		return nil, err
	}
	if err := merkle.VerifyInclusion(index, p.Size, h, proof, p.Root); err != nil {
		return nil, fmt.Errorf("%w: %s entry %d not in the checkpoint of size %d: %v", ErrVerification, log, index, p.Size, err)
	}
	return proof, nil
}

type remoteLog struct {
	r    *RemoteLedger
	name string
	pin  Pin
}

func (l *remoteLog) Name() string { return l.name }

// Entries fetches [from, to) page by page, a few pages ahead, checking each
// leaf; a read from 0 also checks the tree they form against the pin.
func (l *remoteLog) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	if to > l.pin.Size {
		return fmt.Errorf("rederive: %s: entries to %d beyond the pinned size %d", l.name, to, l.pin.Size)
	}
	page := l.r.PageSize
	if page == 0 {
		page = 1000
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		entries []client.Entry
		err     error
	}
	// Up to 4 requests in flight, delivered in order.
	pending := make(chan chan result, 4)
	go func() {
		defer close(pending)
		for start := from; start < to; start += page {
			ch := make(chan result, 1)
			select {
			case pending <- ch:
			case <-ctx.Done():
				return
			}
			end := min(start+page, to)
			go func(start, end uint64) {
				var all []client.Entry
				for start < end {
					es, err := l.r.Client.Entries(ctx, l.name, start, end)
					if err == nil && len(es) == 0 {
						err = fmt.Errorf("rederive: %s: server returned no entries at %d", l.name, start)
					}
					if err != nil {
						ch <- result{err: err}
						return
					}
					all = append(all, es...)
					start += uint64(len(es))
				}
				ch <- result{entries: all}
			}(start, end)
		}
	}()
	var rng = merkle.NewRange()
	verifyTree := from == 0
	next := from
	for ch := range pending {
		res := <-ch
		if res.err != nil {
			if errors.Is(res.err, client.ErrVerification) {
				return fmt.Errorf("%w: %v", ErrVerification, res.err)
			}
			return res.err
		}
		for i := range res.entries {
			e := &res.entries[i]
			if e.Index != next {
				return fmt.Errorf("%w: %s: entry %d where %d was expected", ErrVerification, l.name, e.Index, next)
			}
			leaf, payload, h, err := e.Decode(l.name)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrVerification, l.name, err)
			}
			if verifyTree {
				if err := rng.Append(h[:], nil); err != nil {
					return err
				}
			}
			rec := &ledger.Record{Index: e.Index, Leaf: *leaf, LeafHash: h, Payload: payload, PayloadPruned: e.PayloadPruned}
			if err := fn(rec); err != nil {
				return err
			}
			next++
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if next != to {
		return fmt.Errorf("rederive: %s: read %d entries, want %d", l.name, next-from, to-from)
	}
	if !verifyTree || to == 0 {
		return nil
	}
	var root merkle.Hash
	rb, err := rng.GetRootHash(nil)
	if err != nil {
		return err
	}
	copy(root[:], rb)
	if to == l.pin.Size {
		if root != l.pin.Root {
			return fmt.Errorf("%w: %s: the %d entries served hash to root %s, the signed checkpoint says %s", ErrVerification, l.name, to, root, l.pin.Root)
		}
		return nil
	}
	proof, err := l.r.Client.ConsistencyProof(ctx, l.name, to, l.pin.Size)
	if err != nil {
		return err
	}
	if err := merkle.VerifyConsistency(to, l.pin.Size, proof, root, l.pin.Root); err != nil {
		return fmt.Errorf("%w: %s: the first %d entries are not a prefix of the signed checkpoint of size %d: %v", ErrVerification, l.name, to, l.pin.Size, err)
	}
	return nil
}

// pinBelow returns a pin of log at size (below the latest pin p), its root
// computed by the ledger and, remotely, proven consistent with p. The pin
// names p's signed checkpoint, which the evidence of a run rests on.
func pinBelow(ctx context.Context, lg Ledger, log string, size uint64, p Pin) (Pin, error) {
	if size >= p.Size {
		return p, nil
	}
	switch lg := lg.(type) {
	case LocalLedger:
		l, err := lg.Store.Log(log)
		if err != nil {
			return Pin{}, err
		}
		root, err := l.RootAt(size)
		if err != nil {
			return Pin{}, err
		}
		return Pin{Log: log, Size: size, Root: root, Checkpoint: p.Checkpoint}, nil
	default:
		// Remotely the entries below size are checked while they are read:
		// their tree must be a prefix of p's (a consistency proof). The pin
		// names p's checkpoint, which is what the evidence rests on.
		return Pin{Log: log, Size: size, Checkpoint: p.Checkpoint}, nil
	}
}

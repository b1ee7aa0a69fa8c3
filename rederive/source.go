package rederive

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
)

// Ledger is where a run reads its source logs: the local store
// (LocalLedger) or a remote auditd whose every answer is verified
// (RemoteLedger).
type Ledger interface {
	// Logs lists the log names.
	Logs(ctx context.Context) ([]string, error)
	// Pin returns the latest signed checkpoint of log, or ok false if the
	// log has none yet.
	Pin(ctx context.Context, log string) (p fold.Pin, ok bool, err error)
	// Reader reads log up to the pinned size. A remote reader proves every
	// range it reads against the pin before handing out its entries; an
	// entry that does not check out is an error wrapping ErrVerification.
	Reader(log string, p fold.Pin) fold.LogReader
	// Prove returns the inclusion proof of entry index of log in the tree
	// of the pin's size, checked against the pin's root.
	Prove(ctx context.Context, log string, index uint64, p fold.Pin) ([]merkle.Hash, error)
}

// ErrVerification reports ledger data that did not check out against a
// signed checkpoint: a signature, a leaf, a root or a proof.
var ErrVerification = errors.New("rederive: ledger verification failed")

// ErrAllEventsFailed ends a run whose every event failed to derive (no key
// derived, derivation errors met): the derivation is broken, and the
// store is not judged on it.
var ErrAllEventsFailed = errors.New("rederive: every event failed")

// ErrWatermarkMissing ends a run against a store that reports watermarks
// but none for one of the derivation's source logs.
var ErrWatermarkMissing = errors.New("rederive: no watermark for a source log")

// LedgeredTimes is a Ledger that knows when it ledgered its entries: the
// grace period of drift counts from that time, not from the time the event
// itself carries. LedgeredAt returns when the entry at index of log was
// ledgered; ok is false where that was not recorded (entries from before
// auditd recorded it), and then the event's own time stands in.
type LedgeredTimes interface {
	LedgeredAt(ctx context.Context, log string, index uint64) (t time.Time, ok bool, err error)
}

var (
	_ LedgeredTimes = LocalLedger{}
	_ LedgeredTimes = (*RemoteLedger)(nil)
)

// LedgeredAt is ledger.Log.LedgeredAt.
func (s LocalLedger) LedgeredAt(_ context.Context, log string, index uint64) (time.Time, bool, error) {
	l, err := s.Store.Log(log)
	if err != nil {
		return time.Time{}, false, err
	}
	return l.LedgeredAt(index)
}

// LedgeredAt reads the entry's ledgered_at from the server. The tree does
// not commit to it; it only decides whether a drift is still within its
// grace period.
func (r *RemoteLedger) LedgeredAt(ctx context.Context, log string, index uint64) (time.Time, bool, error) {
	e, err := r.Client.Entry(ctx, log, index)
	if err != nil {
		return time.Time{}, false, err
	}
	if e.LedgeredAt == nil {
		return time.Time{}, false, nil
	}
	return *e.LedgeredAt, true, nil
}

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

func (s LocalLedger) Pin(_ context.Context, log string) (fold.Pin, bool, error) {
	l, err := s.Store.Log(log)
	if err != nil {
		return fold.Pin{}, false, err
	}
	cp := l.Checkpoint()
	if cp == nil {
		return fold.Pin{}, false, nil
	}
	return fold.Pin{Log: log, Size: cp.Size, Root: cp.Root, Checkpoint: string(cp.Note)}, true, nil
}

func (s LocalLedger) Reader(log string, _ fold.Pin) fold.LogReader {
	l, err := s.Store.Log(log)
	if err != nil {
		return errReader{log, err}
	}
	return fold.LocalLog(l)
}

func (s LocalLedger) Prove(_ context.Context, log string, index uint64, p fold.Pin) ([]merkle.Hash, error) {
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

var _ fold.LogReader = errReader{}

// errReader is a reader of a log that could not be opened: every read
// returns err.
type errReader struct {
	name string
	err  error
}

func (r errReader) Name() string { return r.name }
func (r errReader) Entries(context.Context, uint64, uint64, func(*ledger.Record) error) error {
	return r.err
}

// RemoteLedger reads a remote auditd over HTTP and trusts nothing it did
// not check: checkpoints are verified with the verifier key, and every
// entry's leaf is recomputed from its fields and proven part of the pinned
// checkpoint's tree before the entry is handed out. The proof is the
// log's tiles (client.Tree): the roots of its 256-entry bundles, fetched
// once per pin and proven together against the pinned root, which each
// page's leaves must hash to. Against a server that serves no tiles, or
// with PageProofs, every page of entries is proven instead, with the
// inclusion proof of its first entry, to make a tree whose root is the
// pinned checkpoint's (through a consistency proof when the page ends
// short of it).
type RemoteLedger struct {
	Client *client.Client
	// PageSize is the entries fetched and proven as one unit (default
	// 1024, the fold engine's read batch).
	PageSize uint64
	// PageProofs proves each page with an inclusion and a consistency
	// proof, not with the tiles.
	PageProofs bool
	// JSONPages reads the entries from the JSON entry listing, proven by
	// the tiles, not from entry and payload bundles.
	JSONPages bool
	// Cache, if set, keeps the full bundles read, and serves them to later
	// runs once proven against their pin (client.Tree.UseCache).
	Cache *client.BundleCache

	// noBundles is set once the server answered that it serves no
	// payload bundles: the entries are read as JSON from then on.
	noBundles atomic.Bool

	mu    sync.Mutex
	trees map[fold.Pin]*remoteTree
}

// remoteTree is the tiles of one pin, fetched once (done closed after).
type remoteTree struct {
	done chan struct{}
	t    *client.Tree
	err  error
}

// tree returns the proven tiles of log at p, fetching them on first use.
// A failure other than a verification failure or a server without tiles
// (ErrNotFound) is not kept: the next read tries again.
func (r *RemoteLedger) tree(ctx context.Context, log string, p fold.Pin) (*client.Tree, error) {
	key := fold.Pin{Log: log, Size: p.Size, Root: p.Root}
	r.mu.Lock()
	if r.trees == nil {
		r.trees = map[fold.Pin]*remoteTree{}
	}
	rt, ok := r.trees[key]
	if !ok {
		rt = &remoteTree{done: make(chan struct{})}
		r.trees[key] = rt
	}
	r.mu.Unlock()
	if ok {
		select {
		case <-rt.done:
			return rt.t, rt.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	rt.t, rt.err = r.Client.Tree(ctx, log, merkle.Checkpoint{Size: p.Size, Root: p.Root})
	if rt.err == nil && r.Cache != nil && !r.JSONPages {
		if err := rt.t.UseCache(ctx, r.Cache); err != nil {
			rt.t, rt.err = nil, err
		}
	}
	if rt.err != nil && !errors.Is(rt.err, client.ErrVerification) && !errors.Is(rt.err, client.ErrNotFound) {
		r.mu.Lock()
		delete(r.trees, key)
		r.mu.Unlock()
	}
	close(rt.done)
	return rt.t, rt.err
}

var _ Ledger = (*RemoteLedger)(nil)

func (r *RemoteLedger) Logs(ctx context.Context) ([]string, error) { return r.Client.Logs(ctx) }

func (r *RemoteLedger) Pin(ctx context.Context, log string) (fold.Pin, bool, error) {
	cp, note, err := r.Client.Checkpoint(ctx, log)
	if errors.Is(err, client.ErrVerification) {
		return fold.Pin{}, false, verificationErr(err)
	}
	if err != nil {
		// A log signs its first checkpoint after its first append: an
		// empty log has none yet, which is no error (as for LocalLedger).
		// Trusting the server that it is empty is no weaker than trusting
		// its list of logs.
		if es, eerr := r.Client.Entries(ctx, log, 0, 1); eerr == nil && len(es) == 0 {
			return fold.Pin{}, false, nil
		}
		return fold.Pin{}, false, err
	}
	return fold.Pin{Log: log, Size: cp.Size, Root: cp.Root, Checkpoint: string(note)}, true, nil
}

func (r *RemoteLedger) Reader(log string, p fold.Pin) fold.LogReader {
	return &remoteLog{r: r, name: log, pin: p}
}

func (r *RemoteLedger) Prove(ctx context.Context, log string, index uint64, p fold.Pin) ([]merkle.Hash, error) {
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

var _ fold.LogReader = (*remoteLog)(nil)

// remoteLog reads one log of a RemoteLedger up to its pin, proving every
// page it reads.
type remoteLog struct {
	r    *RemoteLedger
	name string
	pin  fold.Pin
}

func (l *remoteLog) Name() string { return l.name }

// RecordsOwned: every page is read into buffers of its own (a response
// body, a cache file, decoded JSON) that nothing reuses, so the fold keeps
// the records' keys and payloads without copying them.
func (l *remoteLog) RecordsOwned() {}

var _ fold.OwnedRecords = (*remoteLog)(nil)

// Entries fetches [from, to) page by page, a few pages ahead, and proves
// each page against the pinned checkpoint (see page) before fn sees any of
// its entries. Each call stands alone, so the fold engine's concurrent
// reads of arbitrary ranges are all proven.
func (l *remoteLog) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	if from > to || to > l.pin.Size {
		return fmt.Errorf("rederive: %s: entries [%d, %d) beyond the pinned size %d", l.name, from, to, l.pin.Size)
	}
	size := l.r.PageSize
	if size == 0 {
		size = 1024
	}
	fetch := func(ctx context.Context, from, to uint64) (pageData, error) {
		recs, _, err := l.page(ctx, from, to)
		return pageData{recs: recs}, err
	}
	if !l.r.PageProofs && to > from {
		tree, err := l.r.tree(ctx, l.name, l.pin)
		switch {
		case err == nil:
			fetch = func(ctx context.Context, from, to uint64) (pageData, error) {
				return l.bundledPage(ctx, tree, from, to)
			}
		case errors.Is(err, client.ErrNotFound):
			// A server that serves no tiles: every page is proven alone.
		default:
			return fmt.Errorf("rederive: %s: tiles of the checkpoint of size %d: %w", l.name, l.pin.Size, verificationErr(err))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		page pageData
		err  error
	}
	// Up to 4 pages in flight, delivered in order.
	pending := make(chan chan result, 4)
	go func() {
		defer close(pending)
		for start := from; start < to; start += size {
			ch := make(chan result, 1)
			select {
			case pending <- ch:
			case <-ctx.Done():
				return
			}
			go func(start, end uint64) {
				page, err := fetch(ctx, start, end)
				ch <- result{page, err}
			}(start, min(start+size, to))
		}
	}()
	next := from
	for ch := range pending {
		res := <-ch
		if res.err != nil {
			return res.err
		}
		n, err := res.page.each(fn)
		next += n
		if err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if next != to {
		return fmt.Errorf("rederive: %s: read %d entries, want %d", l.name, next-from, to-from)
	}
	return nil
}

// tiledPage fetches the entries [from, to) (from < to <= the pin's size),
// recomputes each leaf from the entry's fields, and proves the leaves are
// the log's [from, to) under the pinned checkpoint with its proven tiles.
func (l *remoteLog) tiledPage(ctx context.Context, tree *client.Tree, from, to uint64) ([]ledger.Record, error) {
	entries, err := l.fetchEntries(ctx, from, to)
	if err != nil {
		return nil, err
	}
	recs, hashes, err := l.decode(entries, from)
	if err != nil {
		return nil, err
	}
	if err := tree.Check(ctx, from, hashes); err != nil {
		return nil, verificationErr(err)
	}
	return recs, nil
}

// pageData is a page of entries as read: records, or proven bundles and
// the range [from, to) of their entries that is the page.
type pageData struct {
	recs     []ledger.Record
	bundles  []*client.Bundle
	from, to uint64
}

// each calls fn with each entry of the page in order and returns how many
// it called it with. The entries of bundles go through one Record, filled
// for each in turn (fn does not keep it), not a slice of a record each.
func (p *pageData) each(fn func(*ledger.Record) error) (uint64, error) {
	if p.bundles == nil {
		for i := range p.recs {
			if err := fn(&p.recs[i]); err != nil {
				return uint64(i), err
			}
		}
		return uint64(len(p.recs)), nil
	}
	var rec ledger.Record
	n := uint64(0)
	for _, b := range p.bundles {
		start := b.N * merkle.TileWidth
		lo, hi := max(p.from, start)-start, min(p.to, start+uint64(len(b.Leaves)))-start
		for i := lo; i < hi; i++ {
			rec = ledger.Record{Index: start + i, Leaf: b.Leaves[i], LeafHash: b.Hashes[i],
				Payload: b.Payloads[i], PayloadPruned: b.Pruned[i]}
			if err := fn(&rec); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// bundledPage reads the entries [from, to) (from < to <= the pin's size)
// from the bundles that hold them, fetched in parallel and each proven
// against the pinned tree (client.Tree.Bundle): leaves against the tree,
// payloads against their leaves. Against a server without payload
// bundles, or a bundle too large to be sent whole, it reads the page as
// JSON (tiledPage).
func (l *remoteLog) bundledPage(ctx context.Context, tree *client.Tree, from, to uint64) (pageData, error) {
	if l.r.JSONPages || l.r.noBundles.Load() {
		recs, err := l.tiledPage(ctx, tree, from, to)
		return pageData{recs: recs}, err
	}
	first, last := from/merkle.TileWidth, (to-1)/merkle.TileWidth
	bundles := make([]*client.Bundle, last-first+1)
	// The full bundles in one request, the partial last one of the tree
	// beside it.
	full := len(bundles)
	if (last+1)*merkle.TileWidth > l.pin.Size {
		full--
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	if full > 0 {
		wg.Go(func() {
			var bs []*client.Bundle
			if bs, errs[0] = tree.Bundles(ctx, first, full); errs[0] == nil {
				copy(bundles, bs)
			}
		})
	}
	if full < len(bundles) {
		wg.Go(func() { bundles[full], errs[1] = tree.Bundle(ctx, last) })
	}
	wg.Wait()
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, client.ErrNoPayloadBundles):
			l.r.noBundles.Store(true)
			recs, err := l.tiledPage(ctx, tree, from, to)
			return pageData{recs: recs}, err
		case errors.Is(err, client.ErrPayloadsTooLarge):
			recs, err := l.tiledPage(ctx, tree, from, to)
			return pageData{recs: recs}, err
		default:
			return pageData{}, fmt.Errorf("rederive: %s: entries [%d, %d): %w", l.name, from, to, verificationErr(err))
		}
	}
	n := uint64(0)
	for _, b := range bundles {
		start := b.N * merkle.TileWidth
		if lo, hi := max(from, start), min(to, start+uint64(len(b.Leaves))); hi > lo {
			n += hi - lo
		}
	}
	if n != to-from {
		return pageData{}, fmt.Errorf("%w: %s: %d entries in the bundles for [%d, %d)", ErrVerification, l.name, n, from, to)
	}
	return pageData{bundles: bundles, from: from, to: to}, nil
}

// fetchEntries fetches the entries [from, to), following short pages.
func (l *remoteLog) fetchEntries(ctx context.Context, from, to uint64) ([]client.Entry, error) {
	var entries []client.Entry
	var err error
	for start := from; start < to && err == nil; {
		var es []client.Entry
		es, err = l.r.Client.Entries(ctx, l.name, start, to)
		if err == nil && len(es) == 0 {
			// Below the size its signed checkpoint commits to.
			err = fmt.Errorf("%w: %s: the server served no entry %d of its checkpoint of size %d", ErrVerification, l.name, start, l.pin.Size)
		}
		if entries == nil {
			entries = es
		} else {
			entries = append(entries, es...)
		}
		start += uint64(len(es))
	}
	if err != nil {
		return nil, verificationErr(err)
	}
	if uint64(len(entries)) != to-from {
		return nil, fmt.Errorf("%w: %s: %d entries served for [%d, %d)", ErrVerification, l.name, len(entries), from, to)
	}
	return entries, nil
}

// decode recomputes the leaves of entries, which must be the log's from
// from on, and returns them as records with their leaf hashes.
func (l *remoteLog) decode(entries []client.Entry, from uint64) ([]ledger.Record, []merkle.Hash, error) {
	recs := make([]ledger.Record, len(entries))
	hashes := make([]merkle.Hash, len(entries))
	for i := range entries {
		e := &entries[i]
		if want := from + uint64(i); e.Index != want {
			return nil, nil, fmt.Errorf("%w: %s: entry %d where %d was expected", ErrVerification, l.name, e.Index, want)
		}
		leaf, payload, h, err := e.Decode(l.name)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", ErrVerification, l.name, err)
		}
		recs[i] = ledger.Record{Index: e.Index, Leaf: *leaf, LeafHash: h, Payload: payload, PayloadPruned: e.PayloadPruned}
		hashes[i] = h
	}
	return recs, hashes, nil
}

// page fetches the entries [from, to) (from < to <= the pin's size),
// recomputes each leaf from the entry's fields, and proves the leaves are
// the log's [from, to) under the pinned checkpoint: with the left siblings
// of the inclusion proof of leaf from in the tree of size to (the perfect
// subtrees of [0, from)) they make the root of that tree, which must be
// the pin's root or, below it, be proven a prefix of it by a consistency
// proof. A server that lies in an entry, its index, or a proof hash only
// gets a wrong root. It returns the entries and the root of size to.
func (l *remoteLog) page(ctx context.Context, from, to uint64) ([]ledger.Record, merkle.Hash, error) {
	cl, name, pin := l.r.Client, l.name, l.pin
	var (
		wg               sync.WaitGroup
		path, cons       []merkle.Hash
		pathErr, consErr error
	)
	// The proofs depend on the sizes alone: fetch them alongside.
	if from > 0 {
		wg.Go(func() { path, pathErr = cl.InclusionProof(ctx, name, from, to) })
	}
	if to < pin.Size {
		wg.Go(func() { cons, consErr = cl.ConsistencyProof(ctx, name, to, pin.Size) })
	}
	var entries []client.Entry
	var err error
	for start := from; start < to && err == nil; {
		var es []client.Entry
		es, err = cl.Entries(ctx, name, start, to)
		if err == nil && len(es) == 0 {
			err = fmt.Errorf("rederive: %s: server returned no entries at %d", name, start)
		}
		entries = append(entries, es...)
		start += uint64(len(es))
	}
	wg.Wait()
	if err = errors.Join(verificationErr(err), verificationErr(pathErr), verificationErr(consErr)); err != nil {
		return nil, merkle.Hash{}, err
	}
	if uint64(len(entries)) != to-from {
		return nil, merkle.Hash{}, fmt.Errorf("%w: %s: %d entries served for [%d, %d)", ErrVerification, name, len(entries), from, to)
	}
	recs := make([]ledger.Record, len(entries))
	hashes := make([]merkle.Hash, len(entries))
	for i := range entries {
		e := &entries[i]
		if want := from + uint64(i); e.Index != want {
			return nil, merkle.Hash{}, fmt.Errorf("%w: %s: entry %d where %d was expected", ErrVerification, name, e.Index, want)
		}
		leaf, payload, h, err := e.Decode(name)
		if err != nil {
			return nil, merkle.Hash{}, fmt.Errorf("%w: %s: %v", ErrVerification, name, err)
		}
		recs[i] = ledger.Record{Index: e.Index, Leaf: *leaf, LeafHash: h, Payload: payload, PayloadPruned: e.PayloadPruned}
		hashes[i] = h
	}
	root, err := merkle.RootFromInclusion(from, path, hashes)
	if err != nil {
		return nil, merkle.Hash{}, fmt.Errorf("%w: %s: entries [%d, %d): %v", ErrVerification, name, from, to, err)
	}
	if to == pin.Size {
		if root != pin.Root {
			return nil, merkle.Hash{}, fmt.Errorf("%w: %s: entries [%d, %d) as served hash to root %s, the signed checkpoint of size %d says %s",
				ErrVerification, name, from, to, root, pin.Size, pin.Root)
		}
		return recs, root, nil
	}
	if err := merkle.VerifyConsistency(to, pin.Size, cons, root, pin.Root); err != nil {
		return nil, merkle.Hash{}, fmt.Errorf("%w: %s: entries [%d, %d) as served make a tree of size %d that is not a prefix of the signed checkpoint of size %d: %v",
			ErrVerification, name, from, to, to, pin.Size, err)
	}
	return recs, root, nil
}

// verificationErr marks a client's verification failure as one of the
// ledger (ErrVerification); other errors pass unchanged.
func verificationErr(err error) error {
	if errors.Is(err, client.ErrVerification) {
		// One "verification failed" in the message, not the client's too.
		return fmt.Errorf("%w: %s", ErrVerification, strings.TrimPrefix(err.Error(), client.ErrVerification.Error()+": "))
	}
	return err
}

// rootAt returns the root of log's tree of size (at most p.Size), proven
// against p: the root computed from entry size-1 and the inclusion proof
// of it, and a consistency proof from that root to p's.
func (r *RemoteLedger) rootAt(ctx context.Context, log string, size uint64, p fold.Pin) (merkle.Hash, error) {
	if size == 0 {
		return merkle.EmptyRoot(), nil
	}
	l := &remoteLog{r: r, name: log, pin: p}
	_, root, err := l.page(ctx, size-1, size)
	return root, err
}

// pinBelow returns a pin of log at size (below the latest pin p), its root
// computed by the ledger and, remotely, proven consistent with p (the
// values of a run are computed at that root). The pin
// names p's signed checkpoint, which the evidence of a run rests on.
func pinBelow(ctx context.Context, lg Ledger, log string, size uint64, p fold.Pin) (fold.Pin, error) {
	if size >= p.Size {
		return p, nil
	}
	switch lg := lg.(type) {
	case LocalLedger:
		l, err := lg.Store.Log(log)
		if err != nil {
			return fold.Pin{}, err
		}
		root, err := l.RootAt(size)
		if err != nil {
			return fold.Pin{}, err
		}
		return fold.Pin{Log: log, Size: size, Root: root, Checkpoint: p.Checkpoint}, nil
	case *RemoteLedger:
		root, err := lg.rootAt(ctx, log, size, p)
		if err != nil {
			return fold.Pin{}, fmt.Errorf("rederive: root of %s at size %d: %w", log, size, err)
		}
		return fold.Pin{Log: log, Size: size, Root: root, Checkpoint: p.Checkpoint}, nil
	default:
		return fold.Pin{}, fmt.Errorf("rederive: root of %s at size %d: not known for a %T ledger", log, size, lg)
	}
}

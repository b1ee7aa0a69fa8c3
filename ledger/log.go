package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// Log is one append-only Merkle log. Its methods are safe for concurrent use.
type Log struct {
	s    *Store
	name string
	id   uint32
	reqs chan *appendReq

	committed atomic.Pointer[treeState]
	cp        atomic.Pointer[SignedCheckpoint]
	cpMu      sync.Mutex
	cpNext    chan struct{} // closed when a new checkpoint is published
	failed    atomic.Pointer[error]
	// readOnly is set when the log contradicts its checkpoint file (see
	// admit): it takes no appends and never signs.
	readOnly atomic.Pointer[error]
	// pinned is the checkpoint the log's checkpoint file holds: the latest
	// one signed. Owned by the writer goroutine (and Open before it).
	pinned  *SignedCheckpoint
	stopped chan struct{} // closed when the writer has exited
	// persisted is set once the log's name and metadata are durable: by
	// CreateLog, or by the first commit of a log from LogForAppend.
	persisted atomic.Bool
	// tail and chunks are the id and leaf-hash indexes (see index.go).
	tail   tailIndex
	chunks atomic.Uint64

	// source is the committed source position (see AppendSource).
	source atomic.Pointer[[]byte]

	w    writer     // owned by the run goroutine
	held *appendReq // a request collect took but left for the next group
}

type treeState struct {
	size uint64
	root merkle.Hash
}

// SignedCheckpoint is a checkpoint and its signed note.
type SignedCheckpoint struct {
	merkle.Checkpoint
	Note []byte
}

func newLog(s *Store, name string, id uint32) *Log {
	l := &Log{s: s, name: name, id: id, reqs: make(chan *appendReq, 256), cpNext: make(chan struct{}), stopped: make(chan struct{})}
	l.committed.Store(&treeState{root: merkle.EmptyRoot()})
	l.tail.reset(0)
	return l
}

// Name returns the log's name.
func (l *Log) Name() string { return l.name }

// Origin returns the origin line of the log's checkpoints.
func (l *Log) Origin() string { return l.s.Origin(l.name) }

// Info returns the log's name with its committed size and root, read
// together.
func (l *Log) Info() LogInfo {
	st := l.committed.Load()
	return LogInfo{Name: l.name, Size: st.size, Root: st.root}
}

// Size returns the committed tree size.
func (l *Log) Size() uint64 { return l.committed.Load().size }

// Checkpoint returns the latest signed checkpoint, or nil if none yet.
func (l *Log) Checkpoint() *SignedCheckpoint { return l.cp.Load() }

// Err returns the error that stopped the log's writer, if any.
func (l *Log) Err() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Appended is the outcome of appending one entry.
type Appended struct {
	Index     uint64
	ID        string
	LeafHash  merkle.Hash
	Duplicate bool
}

// AppendResult is the outcome of one Append call.
type AppendResult struct {
	// Size is the committed tree size after the request; it covers every
	// entry of the request.
	Size    uint64
	Entries []Appended
}

type item struct {
	idh    uint64 // the id's index key (idHash)
	leaf   merkle.Leaf
	hash   merkle.Hash
	stored []byte
	index  uint64
}

type appendReq struct {
	items   []item
	source  []byte        // AppendSource: the position to commit with the items
	persist *pebble.Batch // CreateLog: commit this instead of entries
	enq     time.Time
	done    chan struct{}
	res     *AppendResult
	err     error
}

// Append adds entries to the log as one request: either every entry is
// durable (new or a duplicate of what the log holds) when it returns, or none
// was added. An id already held with different content refuses the whole
// request with a *ConflictError.
func (l *Log) Append(ctx context.Context, entries []Entry) (*AppendResult, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	return l.append(ctx, entries, nil)
}

// AppendSource is Append for a source that tracks its own read position,
// such as a Kafka partition: pos is committed in the same Pebble batch as
// the entries, so after a crash SourcePosition returns the position that
// goes with exactly the entries that are durable. entries may be empty to
// move the position alone. If the request is refused, the position is not
// written. pos is opaque to the ledger.
func (l *Log) AppendSource(ctx context.Context, entries []Entry, pos []byte) (*AppendResult, error) {
	if pos == nil {
		return nil, fmt.Errorf("%w: no source position", ErrInvalid)
	}
	return l.append(ctx, entries, pos)
}

// SourcePosition returns the source position committed by the latest
// successful AppendSource, or nil if there is none.
func (l *Log) SourcePosition() []byte {
	if p := l.source.Load(); p != nil {
		return append([]byte(nil), (*p)...)
	}
	return nil
}

func (l *Log) append(ctx context.Context, entries []Entry, pos []byte) (*AppendResult, error) {
	if err := l.refusal(); err != nil {
		return nil, err
	}
	now := l.s.opts.now()
	req := &appendReq{items: make([]item, len(entries)), source: pos, enq: time.Now(), done: make(chan struct{})}
	for i := range entries {
		if err := prepare(l.name, &entries[i], now, &req.items[i]); err != nil {
			return nil, fmt.Errorf("%w: event %d: %v", ErrInvalid, i, err)
		}
	}
	select {
	case l.reqs <- req:
	case <-l.s.quit:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Once queued the request is carried out even if ctx ends; appends are
	// idempotent, so a caller that gave up can retry.
	select {
	case <-req.done:
		return req.res, req.err
	case <-l.stopped:
		// The writer answers everything queued before it stops; a request
		// that slipped in after its last drain was never seen.
		select {
		case <-req.done:
			return req.res, req.err
		default:
			return nil, ErrClosed
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func prepare(log string, e *Entry, now time.Time, it *item) error {
	id := e.ID
	if id == "" {
		id = DeriveID(e)
	}
	ts, assigned := e.Time, false
	if ts.IsZero() {
		ts, assigned = now, true
	}
	it.leaf = merkle.Leaf{
		Log: log, ID: id, HasKey: e.HasKey, Key: e.Key,
		Time: ts.UnixNano(), TimeAssigned: assigned, Source: e.Source,
		Headers: e.Headers, Marks: e.Marks,
	}
	omitted := e.PayloadHash != nil
	if omitted {
		if e.Payload != nil {
			return fmt.Errorf("payload and payload hash both set")
		}
		it.leaf.PayloadSHA256 = *e.PayloadHash
	} else {
		it.leaf.PayloadSHA256 = sha256.Sum256(e.Payload)
	}
	var buf [512]byte
	lb, err := it.leaf.Append(buf[:0])
	if err != nil {
		return err
	}
	it.hash = merkle.LeafHash(lb)
	it.idh = idHash(id)
	it.stored = appendStored(make([]byte, 0, 64+len(id)+len(e.Key)+len(e.Payload)), &it.leaf, e.Payload, e.PayloadJSON, omitted)
	return nil
}

// persist commits b (the log's name and metadata) through the writer and
// marks the log persisted.
func (l *Log) persist(b *pebble.Batch) error {
	req := &appendReq{persist: b, enq: time.Now(), done: make(chan struct{})}
	select {
	case l.reqs <- req:
	case <-l.s.quit:
		return ErrClosed
	}
	select {
	case <-req.done:
		return req.err
	case <-l.stopped:
		select {
		case <-req.done:
			return req.err
		default:
			return ErrClosed
		}
	}
}

// WaitCheckpoint returns the first checkpoint whose size is at least size,
// waiting for one to be signed if needed. A log that exists (CreateLog, or
// a first append) has a checkpoint, of size 0 while it is empty.
func (l *Log) WaitCheckpoint(ctx context.Context, size uint64) (*SignedCheckpoint, error) {
	for {
		l.cpMu.Lock()
		next := l.cpNext
		l.cpMu.Unlock()
		if cp := l.cp.Load(); cp != nil && cp.Size >= size {
			return cp, nil
		}
		if err := l.refusal(); err != nil {
			return nil, err
		}
		select {
		case <-next:
		case <-l.s.quit:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// writer is the state of a log's single writer goroutine.
type writer struct {
	size     uint64
	root     merkle.Hash
	rng      *merkle.Range
	tiles    []*tileBuf
	batch    *pebble.Batch
	visitErr error
	ids      idFilter
	lastSign time.Time
	// awaiting holds the enqueue time and covering size of acknowledged
	// requests not yet covered by a checkpoint.
	awaiting []awaiting
}

type awaiting struct {
	size uint64
	enq  time.Time
}

func (l *Log) run() {
	defer l.s.wg.Done()
	defer close(l.stopped)
	if l.Err() == nil && l.needsCheckpoint() {
		// The tree grew before a crash and no checkpoint covers it yet.
		l.sign()
	}
	var timer *time.Timer
	var timerC <-chan time.Time
	for {
		select {
		case req := <-l.reqs:
			l.process(l.collect(req))
			for l.held != nil {
				h := l.held
				l.held = nil
				l.process(l.collect(h))
			}
		case <-timerC:
			timerC = nil
		case <-l.s.quit:
			l.drain()
			if l.Err() == nil && l.needsCheckpoint() {
				l.sign()
			}
			return
		}
		if l.Err() != nil || !l.needsCheckpoint() {
			continue
		}
		// Sign as soon as the interval has passed, whether or not the timer
		// won the select: under steady load requests are always ready too.
		if wait := l.s.opts.checkpointInterval - time.Since(l.w.lastSign); wait > 0 {
			if timerC == nil {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				timerC = timer.C
			}
			continue
		}
		l.sign()
		if timerC != nil {
			timer.Stop()
			timerC = nil
		}
	}
}

func (l *Log) needsCheckpoint() bool {
	if l.readOnly.Load() != nil {
		return false
	}
	cp := l.cp.Load()
	if cp == nil {
		// A log that exists signs a checkpoint even while empty.
		return l.w.size > 0 || l.persisted.Load()
	}
	return cp.Size < l.w.size
}

// collect gathers queued requests into one group commit.
func (l *Log) collect(first *appendReq) []*appendReq {
	group := []*appendReq{first}
	if first.persist != nil {
		return group
	}
	n := len(first.items)
	var deadline <-chan time.Time
	if d := l.s.opts.batchDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	for n < l.s.opts.maxBatch {
		var r *appendReq
		if deadline == nil {
			select {
			case r = <-l.reqs:
			default:
			}
		} else {
			select {
			case r = <-l.reqs:
			case <-deadline:
			}
		}
		if r == nil {
			break
		}
		if r.persist != nil {
			l.held = r // runs as its own group next
			break
		}
		group, n = append(group, r), n+len(r.items)
	}
	return group
}

// drain refuses requests still queued at shutdown.
func (l *Log) drain() {
	for {
		select {
		case r := <-l.reqs:
			r.err = ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

// process runs one group commit.
func (l *Log) process(group []*appendReq) {
	if err := l.refusal(); err != nil {
		for _, r := range group {
			r.err = err
			close(r.done)
		}
		return
	}
	m := l.s.metrics
	if group[0].persist != nil {
		// collect never groups a persist request with others.
		r := group[0]
		if !l.persisted.Load() {
			if r.err = r.persist.Commit(pebble.Sync); r.err == nil {
				l.markPersisted()
				// An empty log has a checkpoint too (size 0, the empty
				// root), as tlog clients expect; signed before CreateLog
				// returns, so the log is never seen without one.
				l.sign()
			}
		}
		close(r.done)
		return
	}
	pending := map[string]*item{}
	var fresh []*item
	var source []byte
	for _, r := range group {
		r.err = l.resolve(r, pending, &fresh)
		if r.err == nil && r.source != nil {
			source = r.source
		}
	}
	if len(fresh) > 0 || source != nil {
		start := time.Now()
		if err := l.commit(fresh, source); err != nil {
			l.s.log.Error("ledger commit failed; reloading log state", "log", l.name, "err", err)
			if rerr := l.reload(); rerr != nil {
				err = fmt.Errorf("%w: %s: %v (reload: %v)", ErrFailed, l.name, err, rerr)
				l.failed.Store(&err)
				l.s.log.Error("log stopped", "log", l.name, "err", err)
			}
			for _, r := range group {
				if r.err == nil {
					r.err = fmt.Errorf("ledger: append to %s: %w", l.name, err)
				}
				r.res = nil
				close(r.done)
			}
			return
		}
		m.commitLat.Observe(time.Since(start).Seconds())
		m.batch.Observe(float64(len(fresh)))
		m.appended.WithLabelValues(l.name).Add(float64(len(fresh)))
		m.size.WithLabelValues(l.name).Set(float64(l.w.size))
	}
	now := time.Now()
	for _, r := range group {
		if r.err == nil {
			r.res.Size = l.w.size
			l.w.awaiting = append(l.w.awaiting, awaiting{size: l.w.size, enq: r.enq})
			m.appendLat.Observe(now.Sub(r.enq).Seconds())
		}
		close(r.done)
	}
}

// resolve assigns each entry of r a new index or finds it already held.
// New entries join fresh only if the whole request is accepted.
func (l *Log) resolve(r *appendReq, pending map[string]*item, fresh *[]*item) error {
	res := &AppendResult{Entries: make([]Appended, len(r.items))}
	var mine []*item
	local := map[string]*item{}
	localPos := map[string]int{}
	dups := 0
	next := l.w.size + uint64(len(*fresh))
	for i := range r.items {
		it := &r.items[i]
		a := &res.Entries[i]
		a.ID = it.leaf.ID
		if j, dup := localPos[it.leaf.ID]; dup && !sameContent(&r.items[j].leaf, &it.leaf) {
			// The request contradicts itself: a bad request, not a
			// violation of what the log holds.
			l.s.metrics.conflicts.WithLabelValues(l.name, "id_conflict_in_request").Inc()
			return &ConflictError{Log: l.name, ID: it.leaf.ID, Item: i, EarlierItem: j}
		}
		prior, ok := local[it.leaf.ID]
		if !ok {
			prior, ok = pending[it.leaf.ID]
		}
		if !ok && l.w.ids.mayContain(it.idh) {
			rec, err := l.findID(it.idh, it.leaf.ID, ^uint64(0))
			if err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			if rec != nil {
				prior, ok = &item{leaf: rec.Leaf, hash: rec.LeafHash, index: rec.Index}, true
			}
		}
		if ok {
			if !sameContent(&prior.leaf, &it.leaf) {
				l.s.metrics.conflicts.WithLabelValues(l.name, "id_conflict").Inc()
				if r.source == nil {
					// A source that tracks its position (Kafka) resolves
					// reused ids itself: a producer retry is not a
					// violation of what the log holds.
					l.s.metrics.violations.WithLabelValues(l.name, "id_conflict").Inc()
					l.s.log.Warn("integrity violation: event id reused with different content", "log", l.name, "id", it.leaf.ID, "index", prior.index)
				}
				return &ConflictError{Log: l.name, ID: it.leaf.ID, Index: prior.index, Item: i, EarlierItem: -1}
			}
			a.Index, a.LeafHash, a.Duplicate = prior.index, prior.hash, true
			dups++
			continue
		}
		it.index = next + uint64(len(mine))
		a.Index, a.LeafHash = it.index, it.hash
		local[it.leaf.ID] = it
		localPos[it.leaf.ID] = i
		mine = append(mine, it)
	}
	for _, it := range mine {
		pending[it.leaf.ID] = it
	}
	*fresh = append(*fresh, mine...)
	if dups > 0 {
		l.s.metrics.duplicates.WithLabelValues(l.name).Add(float64(dups))
	}
	r.res = res
	return nil
}

// commit writes fresh entries, their index keys, the tiles they touch and
// the log's new size and root in one synced batch.
func (l *Log) commit(fresh []*item, source []byte) error {
	w := &l.w
	capacity := 64 + len(source)
	if len(fresh) > 0 {
		capacity += len(fresh) * (len(fresh[0].stored) + 96)
	}
	b := l.s.db.NewBatchWithSize(capacity)
	defer b.Close()
	if source != nil {
		_ = b.Set(sourceKey(l.id), source, nil)
	}
	w.batch, w.visitErr = b, nil
	for _, it := range fresh {
		if err := w.rng.Append(it.hash, l.visit); err != nil {
			return err
		}
		_ = b.Set(entryKey(l.id, it.index), it.stored, nil)
		w.ids.add(it.idh)
	}
	if w.visitErr != nil {
		return w.visitErr
	}
	for _, t := range w.tiles {
		if t.dirty {
			_ = b.Set(tileKey(l.id, t.level, t.n), t.value(), nil)
			t.dirty = false
		}
	}
	size := w.rng.End()
	r, err := w.rng.Root()
	if err != nil {
		return err
	}
	_ = b.Set(metaKey(l.id), encodeMeta(logMeta{name: l.name, size: size, root: r}), nil)
	first := !l.persisted.Load()
	if first {
		_ = b.Set(nameKey(l.name), binary.BigEndian.AppendUint32(nil, l.id), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if first {
		l.markPersisted()
	}
	if source != nil {
		src := append([]byte(nil), source...)
		l.source.Store(&src)
	}
	w.size, w.root = size, r
	l.tail.add(fresh)
	l.committed.Store(&treeState{size: size, root: r})
	if size>>indexChunkBits > l.chunks.Load() {
		if err := l.ingestChunks(size); err != nil {
			// The entries are durable and still indexed in memory; the
			// next commit tries again.
			l.s.log.Error("index chunk not ingested", "log", l.name, "err", err)
		}
	}
	return nil
}

func (l *Log) markPersisted() {
	l.persisted.Store(true)
	l.s.metrics.size.WithLabelValues(l.name).Set(float64(l.w.size))
	l.s.log.Info("log created", "log", l.name)
}

// visit records the new tree nodes that tiles store.
func (l *Log) visit(id merkle.NodeID, hash merkle.Hash) {
	w := &l.w
	sub := id.Level % tileHeight
	if sub != 0 && sub != midLevel {
		return
	}
	lvl := int(id.Level / tileHeight)
	for len(w.tiles) <= lvl {
		w.tiles = append(w.tiles, &tileBuf{level: uint8(len(w.tiles))})
	}
	t := w.tiles[lvl]
	if sub == midLevel {
		if id.Index/midStride != t.n || uint64(len(t.mid)) != id.Index%midStride {
			w.visitErr = fmt.Errorf("ledger: node %d/%d out of order in tile %d/%d", id.Level, id.Index, lvl, t.n)
			return
		}
		t.mid = append(t.mid, hash)
		return
	}
	if n := id.Index / tileWidth; n != t.n {
		// The previous tile is full: write it out and start the next.
		if t.dirty {
			_ = w.batch.Set(tileKey(l.id, uint8(lvl), t.n), t.value(), nil)
		}
		*t = tileBuf{level: uint8(lvl), n: n, base: make([]merkle.Hash, 0, tileWidth), mid: make([]merkle.Hash, 0, tileWidth/midStride)}
	}
	if uint64(len(t.base)) != id.Index%tileWidth {
		w.visitErr = fmt.Errorf("ledger: node %d/%d out of order in tile %d/%d", id.Level, id.Index, lvl, t.n)
		return
	}
	t.base = append(t.base, hash)
	t.dirty = true
}

// load rebuilds the writer state and the latest checkpoint from storage.
func (l *Log) load() error {
	v, closer, err := l.s.db.Get(metaKey(l.id))
	if err != nil {
		return err
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		return err
	}
	r := hashReader{db: l.s.db, log: l.id}
	rng, err := merkle.RangeAt(m.size, r)
	if err != nil {
		return fmt.Errorf("rebuild tree of size %d: %w", m.size, err)
	}
	root, err := rng.Root()
	if err != nil {
		return err
	}
	if root != m.root {
		return fmt.Errorf("root of the stored tiles %s does not match the recorded root %s at size %d", root, m.root, m.size)
	}
	var tiles []*tileBuf
	for lvl := 0; m.size>>(tileHeight*lvl) > 0; lvl++ {
		count := m.size >> (tileHeight * lvl)
		t := &tileBuf{level: uint8(lvl), n: count / tileWidth}
		if w := int(count % tileWidth); w > 0 {
			v, closer, err := l.s.db.Get(tileKey(l.id, uint8(lvl), t.n))
			if err != nil {
				return fmt.Errorf("read tile %d/%d: %w", lvl, t.n, err)
			}
			base, mid, err := decodeTile(v)
			closer.Close()
			if err != nil {
				return err
			}
			if len(base) < w {
				return fmt.Errorf("tile %d/%d has %d hashes, want %d", lvl, t.n, len(base), w)
			}
			// Copies with room to grow: base and mid share one array, and
			// appending to base in place would overwrite mid.
			t.base = append(make([]merkle.Hash, 0, tileWidth), base[:w]...)
			t.mid = append(make([]merkle.Hash, 0, tileWidth/midStride), mid[:w/midStride]...)
		}
		tiles = append(tiles, t)
	}
	cp, err := l.latestStoredCheckpoint()
	if err != nil {
		return err
	}
	if cp != nil {
		if cp.Size > m.size {
			return fmt.Errorf("checkpoint at size %d is beyond the stored tree of size %d", cp.Size, m.size)
		}
		at, err := merkle.RootHash(cp.Size, r)
		if err != nil {
			return err
		}
		if at != cp.Root {
			return fmt.Errorf("latest checkpoint (size %d, root %s) does not match the stored tree (root %s)", cp.Size, cp.Root, at)
		}
	}
	l.committed.Store(&treeState{size: m.size, root: root})
	l.source.Store(nil)
	if v, closer, err := l.s.db.Get(sourceKey(l.id)); err == nil {
		src := append([]byte(nil), v...)
		closer.Close()
		l.source.Store(&src)
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("read source position: %w", err)
	}
	ids, err := l.loadIndex(m.size)
	if err != nil {
		return fmt.Errorf("rebuild the id and leaf-hash indexes: %w", err)
	}
	l.w = writer{size: m.size, root: root, rng: rng, tiles: tiles, ids: ids}
	l.s.metrics.size.WithLabelValues(l.name).Set(float64(m.size))
	// Last, with the state loaded: a log refused here may still be served
	// read-only.
	bad, err := l.admit(cp, r)
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	return nil
}

// reload restores the writer state from storage after a failed commit.
func (l *Log) reload() error {
	last := l.w.lastSign
	aw := l.w.awaiting
	if !l.persisted.Load() {
		// Nothing of the log reached storage.
		l.w = writer{root: merkle.EmptyRoot(), rng: merkle.NewRange(), lastSign: last}
		l.committed.Store(&treeState{root: merkle.EmptyRoot()})
		l.tail.reset(0)
		return nil
	}
	if err := l.load(); err != nil {
		var ie *IntegrityError
		if errors.As(err, &ie) {
			l.s.integrity(ie)
			l.setReadOnly(ie)
		}
		return err
	}
	l.w.lastSign, l.w.awaiting = last, aw
	return nil
}

func (l *Log) latestStoredCheckpoint() (*SignedCheckpoint, error) {
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: checkpointKey(l.id, 0), UpperBound: logKey(kindCheckpoint, l.id+1, 0)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if !it.Last() {
		return nil, it.Error()
	}
	return l.parseCheckpoint(it.Value())
}

func (l *Log) parseCheckpoint(note []byte) (*SignedCheckpoint, error) {
	c, err := merkle.OpenCheckpoint(note, l.s.verifier, l.Origin())
	if err != nil {
		return nil, fmt.Errorf("stored checkpoint: %w", err)
	}
	return &SignedCheckpoint{Checkpoint: c, Note: append([]byte(nil), note...)}, nil
}

// sign signs, stores and publishes a checkpoint of the committed tree. The
// order makes a crash between any two steps safe: the note is stored in
// Pebble, then written to the checkpoint file, and only then published
// (served, waited for). A crash before the file write leaves a stored
// checkpoint newer than the file, which Open writes to the file before
// publishing it (admit); the file is never behind a published checkpoint.
func (l *Log) sign() {
	w := &l.w
	if l.readOnly.Load() != nil {
		return
	}
	// Never sign a checkpoint inconsistent with the latest one signed, the
	// one the checkpoint file holds (pinned): not below its size, and at
	// its size only with its root. Above its size the tree's root at
	// pinned.Size is pinned.Root without reading it again: admit proved
	// it from the stored tiles when the tree was loaded (at open, and at
	// every reload after a failed commit), and since then the writer has
	// only appended leaves to its compact range, which leaves the first
	// pinned.Size leaves, and so that root, unchanged. Each checkpoint
	// signed here becomes the new pin and is of the current tree, so the
	// argument carries on from one checkpoint to the next.
	if p := l.pinned; p != nil && (w.size < p.Size || w.size == p.Size && w.root != p.Root) {
		e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityRollback,
			Detail: fmt.Sprintf("refusing to sign size %d (root %s): the checkpoint file holds the checkpoint signed at size %d with root %s", w.size, w.root, p.Size, p.Root)})
		l.setReadOnly(e)
		w.lastSign = time.Now()
		return
	}
	c := merkle.Checkpoint{Origin: l.Origin(), Size: w.size, Root: w.root}
	n, err := c.Sign(l.s.signer)
	if err == nil {
		err = l.s.db.Set(checkpointKey(l.id, c.Size), n, pebble.Sync)
	}
	if err == nil {
		err = l.s.cpFiles.write(l.name, n)
	}
	if err != nil {
		// The tree is durable; the next interval tries again.
		l.s.log.Error("checkpoint not signed", "log", l.name, "size", c.Size, "err", err)
		w.lastSign = time.Now()
		return
	}
	now := time.Now()
	if c.Size > 0 {
		// The empty log's checkpoint does not hold back the first one of
		// entries: that is signed as soon as they are durable.
		w.lastSign = now
	}
	scp := &SignedCheckpoint{Checkpoint: c, Note: n}
	l.pinned = scp
	l.cp.Store(scp)
	l.cpMu.Lock()
	close(l.cpNext)
	l.cpNext = make(chan struct{})
	l.cpMu.Unlock()
	m := l.s.metrics
	m.checkpoints.WithLabelValues(l.name).Inc()
	k := 0
	for _, a := range w.awaiting {
		if a.size <= c.Size {
			m.cpLat.Observe(now.Sub(a.enq).Seconds())
			continue
		}
		w.awaiting[k] = a
		k++
	}
	w.awaiting = w.awaiting[:k]
}

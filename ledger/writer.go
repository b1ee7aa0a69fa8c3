package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// The group commit: one writer goroutine per log (the appender's run) takes
// the queued append requests, resolves duplicates and applies them to
// Pebble in one batch with the tiles they complete. The batch's WAL sync is
// waited for by the log's publisher goroutine, which then publishes the new
// tree and acknowledges the requests, in the order the writer applied them;
// meanwhile the writer goes on with the next group (up to maxInFlight
// groups between apply and acknowledgement), so that the CPU work of one
// group overlaps the fsync of the one before. Checkpoints are signed by
// the log's signer goroutine (see sign.go), so that storing a checkpoint
// and writing its file never hold up a commit.

// maxInFlight bounds the groups applied to Pebble and not yet acknowledged.
// Two would be enough to overlap one fsync with the next group's work; a
// few more let the writer run on while the publisher ingests an index
// chunk.
const maxInFlight = 4

// appender is a log's append path: the queue of requests, the writer
// goroutine's state (collect, resolve, stage, land) and the publisher's
// (publish). The writer owns everything here but reqs, which callers send
// on, and flights, its hand-over to the publisher.
type appender struct {
	l *Log
	// writer is the tree the writer builds on; a reload after a failed
	// commit replaces it (and leaves the rest alone).
	writer
	reqs    chan *appendReq
	flights chan *flight // the writer's group commits to the publisher, in order
	held    *appendReq   // a request collect took but left for the next group
	// flying are the flights staged and not yet landed, oldest first.
	flying []*flight
	// nameStaged: a flight not yet landed writes the log's name.
	nameStaged bool
}

// writer is the tree state of a log's writer goroutine.
type writer struct {
	size     uint64
	root     merkle.Hash
	rng      *merkle.Range
	tiles    []*tileBuf
	batch    *pebble.Batch
	visitErr error
	ids      idFilter
}

// emptyWriter is the writer state of a log with no entries.
func emptyWriter() writer { return writer{root: merkle.EmptyRoot(), rng: merkle.NewRange()} }

// flight is a group commit between the writer and the publisher: applied
// to Pebble (when it writes anything) and waiting for its WAL sync.
type flight struct {
	group   []*appendReq
	batch   *pebble.Batch // nil when the group writes nothing (duplicates, refusals)
	fresh   []*item
	pending *byID[*item] // fresh by id, for the duplicate checks of later groups
	source  []byte
	size    uint64 // the tree once the flight is durable
	root    merkle.Hash
	first   bool // the flight writes the log's name: it makes the log persisted
	start   time.Time
	done    chan struct{} // closed by the publisher, err set before
	err     error
}

func newAppender(l *Log) appender {
	return appender{l: l, reqs: make(chan *appendReq, 256), flights: make(chan *flight, maxInFlight)}
}

// submit queues req for the writer and waits for the answer: it returns
// nil once req is answered (req.err and req.res hold the answer), or why
// it was not. Once queued the request is carried out even if ctx ends;
// appends are idempotent, so a caller that gave up can retry.
func (a *appender) submit(ctx context.Context, req *appendReq) error {
	l := a.l
	select {
	case a.reqs <- req:
	case <-l.s.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-l.stopped:
		// The writer answers everything queued before it stops; a request
		// that slipped in after its last drain was never seen.
		select {
		case <-req.done:
			return nil
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the log's writer goroutine; it starts the signer and publisher
// goroutines and stops them when the store closes.
func (a *appender) run() {
	l := a.l
	defer l.s.wg.Done()
	defer close(l.stopped)
	// The tree may have grown before a crash with no checkpoint covering
	// it yet: signed before anything else.
	l.signer.signNow()
	signerDone := make(chan struct{})
	go func() {
		defer close(signerDone)
		l.signer.loop()
	}()
	publisherDone := make(chan struct{})
	go func() {
		defer close(publisherDone)
		a.publishLoop()
	}()
	for {
		// An idle log lands its flights once they are published: until
		// then each keeps its requests, their entries and results (a whole
		// POST's worth) alive.
		var published <-chan struct{}
		if len(a.flying) > 0 {
			published = a.flying[0].done
		}
		select {
		case <-published:
			a.land(len(a.flying)) // the published ones, without waiting
		case req := <-a.reqs:
			a.process(a.collect(req))
			for a.held != nil {
				h := a.held
				a.held = nil
				a.process(a.collect(h))
			}
		case <-l.s.quit:
			a.land(0) // what was applied is acknowledged (or refused) first
			a.drain()
			close(a.flights)
			<-publisherDone
			<-signerDone
			l.signer.signNow() // the last checkpoint covers everything acknowledged
			return
		}
	}
}

// collect gathers queued requests into one group commit.
func (a *appender) collect(first *appendReq) []*appendReq {
	group := []*appendReq{first}
	if first.persist != nil {
		return group
	}
	opts := &a.l.s.opts
	n := len(first.items)
	var deadline <-chan time.Time
	if d := opts.batchDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	for n < opts.maxBatch {
		var r *appendReq
		if deadline == nil {
			select {
			case r = <-a.reqs:
			default:
			}
		} else {
			select {
			case r = <-a.reqs:
			case <-deadline:
			}
		}
		if r == nil {
			break
		}
		if r.persist != nil {
			a.held = r // runs as its own group next
			break
		}
		group, n = append(group, r), n+len(r.items)
	}
	return group
}

// drain refuses requests still queued at shutdown.
func (a *appender) drain() {
	for {
		select {
		case r := <-a.reqs:
			r.err = ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

// answer answers every request of group with err.
func answer(group []*appendReq, err error) {
	for _, r := range group {
		r.err = err
		close(r.done)
	}
}

// process runs one group commit: it stages the group and hands it to the
// publisher.
func (a *appender) process(group []*appendReq) {
	l := a.l
	a.land(maxInFlight - 1)
	if err := l.refusal(); err != nil {
		answer(group, err)
		return
	}
	if group[0].persist != nil {
		// collect never groups a persist request with others.
		a.persist(group[0])
		return
	}
	n, bytes := 0, 0
	for _, r := range group {
		n += len(r.items)
		for i := range r.items {
			bytes += len(r.items[i].stored)
		}
	}
	if err := l.s.space.admit(bytes); err != nil {
		// Refused before anything was resolved or written: the writer's
		// state is as it was.
		answer(group, fmt.Errorf("ledger: append to %s: %w", l.name, err))
		return
	}
	f := a.resolveGroup(group, n)
	if len(f.fresh) > 0 || f.source != nil {
		if err := a.stage(f); err != nil {
			a.stageFailed(f, err)
			return
		}
	}
	a.flying = append(a.flying, f)
	a.flights <- f
}

// persist commits a CreateLog request (the log's name and metadata), once
// the flights before it have landed.
func (a *appender) persist(r *appendReq) {
	l := a.l
	a.land(0)
	if !l.st.state().persisted {
		if r.err = l.s.write(func() error { return r.persist.Commit(pebble.Sync) }); r.err == nil {
			a.markPersisted(a.size)
			// An empty log has a checkpoint too (size 0, the empty
			// root), as tlog clients expect; signed before CreateLog
			// returns, so the log is never seen without one.
			l.signer.signNow()
		}
	}
	close(r.done)
}

// resolveGroup resolves a group's requests (n entries in all) into a new
// flight: the entries new to the log, and each request's answer or
// refusal.
func (a *appender) resolveGroup(group []*appendReq, n int) *flight {
	// The id filter's answers come first, in a loop of their own: each test
	// misses the cache (the filter of a log of millions is megabytes), and
	// a loop of nothing else lets the misses overlap. Each id is added as it
	// is tested, while its block is in the cache: an id of a request refused
	// below, or of a group that fails, stays in the filter as a false
	// "maybe", which the lookup behind it answers. An id repeated within the
	// group is "maybe" the second time, and found in the group's maps.
	for _, r := range group {
		for i := range r.items {
			r.items[i].maybe = a.ids.testAndAdd(r.items[i].idh)
		}
	}
	f := &flight{group: group, pending: newByID[*item](n), start: time.Now(), done: make(chan struct{})}
	for _, r := range group {
		r.err = a.resolve(r, f.pending, &f.fresh)
		if r.err == nil && r.source != nil {
			f.source = r.source
		}
	}
	f.size, f.root = a.size, a.root
	return f
}

// stageFailed answers a flight Pebble refused before applying it. The
// writer's state may be half updated: the flights before land, then it is
// reloaded from storage.
func (a *appender) stageFailed(f *flight, err error) {
	if !a.land(0) {
		a.restore(err)
	}
	for _, r := range f.group {
		if r.err == nil {
			r.err = fmt.Errorf("ledger: append to %s: %w", a.l.name, err)
		}
		r.res = nil
		close(r.done)
	}
}

// land drops the flights the publisher is done with, oldest first, waiting
// until at most keep are left. After a failed one it waits for them all and
// stops the log (see halt); it reports whether it did.
func (a *appender) land(keep int) bool {
	var err error
	for len(a.flying) > 0 {
		f := a.flying[0]
		if err == nil && len(a.flying) <= keep {
			select {
			case <-f.done:
			default:
				return false
			}
		}
		<-f.done
		if err == nil {
			err = f.err
		}
		a.flying[0] = nil
		a.flying = a.flying[1:]
	}
	if err != nil {
		a.halt(err)
		return true
	}
	return false
}

// halt stops the log after a WAL sync failed. The failed batches are in
// Pebble's memtable, visible to reads of the store, but not durable: a
// reload would take the tree they make for the log's and sign it, and a
// restart would then find a signed checkpoint beyond what the disk holds.
// So nothing more is appended or signed; the log serves what is durable
// until the daemon restarts and opens the store from its WAL. Pebble's WAL
// writer keeps its first error, so no later commit would succeed anyway.
func (a *appender) halt(err error) {
	l := a.l
	err = fmt.Errorf("%w: %s: WAL sync failed, the log takes no more appends until a restart: %v", ErrFailed, l.name, err)
	l.st.fail(err)
	l.s.log.Error("log stopped", "log", l.name, "err", err)
}

// restore reloads the writer's state from storage after a group failed
// before Pebble applied it, with no flight left; a log whose state does not
// load is stopped.
func (a *appender) restore(err error) {
	l := a.l
	l.s.log.Error("ledger commit failed; reloading log state", "log", l.name, "err", err)
	l.signer.mu.Lock() // reload re-admits the tree against the checkpoint file
	rerr := a.reload()
	l.signer.mu.Unlock()
	a.nameStaged = l.st.state().persisted
	if rerr != nil {
		err = fmt.Errorf("%w: %s: %v (reload: %v)", ErrFailed, l.name, err, rerr)
		l.st.fail(err)
		l.s.log.Error("log stopped", "log", l.name, "err", err)
	}
}

// publishLoop is the publisher: it waits for each flight's WAL sync, in the
// order the writer staged them, then publishes the tree and acknowledges
// the flight's requests. Once a flight fails, every later one fails too:
// each was staged on the state the failed one left, and the writer halts
// the log when it lands them (a restore, which follows no failed flight,
// starts no new run of flights).
func (a *appender) publishLoop() {
	failed := false
	for f := range a.flights {
		var err error
		if f.batch != nil {
			err = f.batch.SyncWait()
			if err == nil {
				f.batch.Close()
			}
		}
		if err == nil && failed {
			err = errors.New("an earlier group commit failed")
		}
		if err != nil {
			failed = true
			for _, r := range f.group {
				if r.err == nil {
					r.err = fmt.Errorf("ledger: append to %s: %w", a.l.name, err)
				}
				r.res = nil
				close(r.done)
			}
			f.err = err
			close(f.done)
			continue
		}
		a.publish(f)
		close(f.done)
	}
}

// publish makes a durable flight's entries visible and acknowledges its
// requests.
func (a *appender) publish(f *flight) {
	l := a.l
	m := l.s.metrics
	if f.batch != nil {
		if f.first {
			a.markPersisted(f.size)
		}
		if f.source != nil {
			src := append([]byte(nil), f.source...)
			l.source.Store(&src)
		}
		l.tail.add(f.fresh)
		l.committed.Store(&treeState{size: f.size, root: f.root})
		if f.size>>indexChunkBits > l.chunks.Load() {
			if err := l.ingestChunks(f.size); err != nil {
				// The entries are durable and still indexed in memory; the
				// next commit tries again.
				l.s.log.Error("index chunk not ingested", "log", l.name, "err", err)
			}
		}
		m.commitLat.Observe(time.Since(f.start).Seconds())
		m.batch.Observe(float64(len(f.fresh)))
		m.appended.WithLabelValues(l.name).Add(float64(len(f.fresh)))
		m.size.WithLabelValues(l.name).Set(float64(f.size))
		if f.size >= bigLogEntries {
			l.s.big.add(l.id)
		}
		l.signer.nudge()
	}
	now := time.Now()
	l.signer.acked(f.size, f.group)
	for _, r := range f.group {
		if r.err == nil {
			r.res.Size = f.size
			m.appendLat.Observe(now.Sub(r.enq).Seconds())
		}
	}
	for _, r := range f.group {
		close(r.done)
	}
}

// resolve assigns each entry of r a new index or finds it already held.
// New entries join fresh only if the whole request is accepted.
func (a *appender) resolve(r *appendReq, pending *byID[*item], fresh *[]*item) error {
	l := a.l
	res := &AppendResult{Entries: make([]Appended, len(r.items))}
	var mine []*item
	local := newByID[int](len(r.items))
	dups := 0
	next := a.size + uint64(len(*fresh))
	for i := range r.items {
		it := &r.items[i]
		out := &res.Entries[i]
		out.ID = it.leaf.ID
		var prior *item
		j, ok := local.get(it.idh, it.leaf.ID)
		if ok {
			if !sameContent(&r.items[j].leaf, &it.leaf) {
				// The request contradicts itself: a bad request, not a
				// violation of what the log holds.
				l.s.metrics.conflicts.WithLabelValues(l.name, "id_conflict_in_request").Inc()
				return &ConflictError{Log: l.name, ID: it.leaf.ID, Item: i, EarlierItem: j}
			}
			prior = &r.items[j]
		} else {
			prior, ok = pending.get(it.idh, it.leaf.ID)
		}
		if !ok && it.maybe {
			// Staged by a flight not yet landed: not in the index yet.
			for _, f := range a.flying {
				if prior, ok = f.pending.get(it.idh, it.leaf.ID); ok {
					break
				}
			}
		}
		if !ok && it.maybe {
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
			out.Index, out.LeafHash, out.Duplicate = prior.index, prior.hash, true
			dups++
			continue
		}
		it.index = next + uint64(len(mine))
		out.Index, out.LeafHash = it.index, it.hash
		local.put(it.idh, it.leaf.ID, i)
		mine = append(mine, it)
	}
	for _, it := range mine {
		pending.put(it.idh, it.leaf.ID, it)
	}
	*fresh = append(*fresh, mine...)
	if dups > 0 {
		l.s.metrics.duplicates.WithLabelValues(l.name).Add(float64(dups))
	}
	r.res = res
	return nil
}

// stage applies f's fresh entries, their index keys, the tiles they touch
// and the log's new size and root to Pebble in one batch, whose WAL sync the
// publisher waits for, and advances the writer's state to them.
func (a *appender) stage(f *flight) error {
	l, w := a.l, &a.writer
	fresh, source := f.fresh, f.source
	capacity := 64 + len(source)
	if len(fresh) > 0 {
		capacity += len(fresh) * (len(fresh[0].stored) + 96)
	}
	b := l.s.db.NewBatchWithSize(capacity)
	if source != nil {
		_ = b.Set(sourceKey(l.id), source, nil)
	}
	w.batch, w.visitErr = b, nil
	defer func() { w.batch = nil }()
	applied := false
	defer func() {
		if !applied {
			b.Close() // refused before Pebble saw it
		}
	}()
	for _, it := range fresh {
		if err := w.rng.Append(it.hash, a.visit); err != nil {
			return err
		}
		_ = b.Set(entryKey(l.id, it.index), it.stored, nil)
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
	if size > w.size {
		// When these entries were ledgered, for the grace period of drift
		// checks (LedgeredAt): one key per group commit.
		_ = b.Set(ledgeredKey(l.id, size), binary.BigEndian.AppendUint64(nil, uint64(l.s.opts.now().UnixNano())), nil)
	}
	f.first = !l.st.state().persisted && !a.nameStaged
	if f.first {
		_ = b.Set(nameKey(l.name), binary.BigEndian.AppendUint32(nil, l.id), nil)
	}
	applied = true // from here Pebble may hold b: SyncWait comes before Close
	if err := l.s.write(func() error { return l.s.db.ApplyNoSyncWait(b, pebble.Sync) }); err != nil {
		return err
	}
	if f.first {
		a.nameStaged = true
	}
	f.batch = b
	f.size, f.root = size, r
	w.size, w.root = size, r
	return nil
}

// markPersisted records that the log's name and metadata are durable.
func (a *appender) markPersisted(size uint64) {
	l := a.l
	l.st.persisted.Store(true)
	l.s.metrics.size.WithLabelValues(l.name).Set(float64(size))
	l.s.metrics.initLog(l.name)
	l.s.log.Info("log created", "log", l.name)
}

// visit records the new tree nodes that tiles store.
func (a *appender) visit(id merkle.NodeID, hash merkle.Hash) {
	w := &a.writer
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
			_ = w.batch.Set(tileKey(a.l.id, uint8(lvl), t.n), t.value(), nil)
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

// byID maps event ids to values for the writer's duplicate checks. It is
// keyed by the id's 64-bit index key (item.idh, already computed), so a
// lookup hashes 8 bytes rather than the id; an id whose key collides with
// another id's goes to a map keyed by the id itself.
type byID[V any] struct {
	hashed map[uint64]idValue[V]
	clash  map[string]V
}

type idValue[V any] struct {
	id string
	v  V
}

func newByID[V any](n int) *byID[V] { return &byID[V]{hashed: make(map[uint64]idValue[V], n)} }

func (m *byID[V]) get(h uint64, id string) (V, bool) {
	e, ok := m.hashed[h]
	if !ok || e.id == id {
		return e.v, ok
	}
	v, ok := m.clash[id]
	return v, ok
}

// put files a value under an id it does not hold yet.
func (m *byID[V]) put(h uint64, id string, v V) {
	if e, ok := m.hashed[h]; ok && e.id != id {
		if m.clash == nil {
			m.clash = map[string]V{}
		}
		m.clash[id] = v
		return
	}
	m.hashed[h] = idValue[V]{id, v}
}

package ledger

import (
	"context"
	"crypto/sha256"
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
	// signMu serializes signing (the signer goroutine, and the writer
	// when it signs at start, on CreateLog and at close) with the
	// writer's reload after a failed commit. It guards pinned and
	// lastSign.
	signMu sync.Mutex
	// pinned is the checkpoint the log's checkpoint file holds: the latest
	// one signed. Guarded by signMu (Open sets it before the goroutines
	// start).
	pinned   *SignedCheckpoint
	lastSign time.Time     // when the latest checkpoint of entries was signed
	grew     chan struct{} // the writer's nudge to the signer: the tree grew
	// awaiting holds the acknowledged requests no checkpoint covers yet
	// (for the checkpoint latency metric).
	awMu     sync.Mutex
	awaiting []awaiting
	stopped  chan struct{} // closed when the writer (and the signer) have exited
	// persisted is set once the log's name and metadata are durable: by
	// CreateLog, or by the first commit of a log from LogForAppend.
	persisted atomic.Bool
	// tail and chunks are the id and leaf-hash indexes (see index.go).
	tail   tailIndex
	chunks atomic.Uint64

	// source is the committed source position (see AppendSource).
	source atomic.Pointer[[]byte]

	w       writer       // owned by the run goroutine
	pl      pipeline     // owned by the run goroutine
	flights chan *flight // the writer's group commits to the publisher, in order
	held    *appendReq   // a request collect took but left for the next group
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
	l := &Log{s: s, name: name, id: id, reqs: make(chan *appendReq, 256), cpNext: make(chan struct{}), grew: make(chan struct{}, 1), stopped: make(chan struct{}), flights: make(chan *flight, maxInFlight)}
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
	if p := l.s.fatal.Load(); p != nil {
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
	maybe  bool // the id filter may hold idh (process asks it first)
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
	if err := l.s.space.err(); err != nil {
		l.s.space.refused.Inc()
		return nil, fmt.Errorf("ledger: append to %s: %w", l.name, err)
	}
	now := l.s.opts.now()
	req := &appendReq{items: make([]item, len(entries)), source: pos, enq: time.Now(), done: make(chan struct{})}
	// The entries' stored forms share one allocation (they live as long
	// as the request).
	capacity := 0
	for i := range entries {
		capacity += storedEstimate(&entries[i])
	}
	slab := make([]byte, 0, capacity)
	for i := range entries {
		if err := prepare(l.name, &entries[i], now, &req.items[i], &slab); err != nil {
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

// storedEstimate is about the size of e's stored form (appendStored): more
// for most entries, and fine if less.
func storedEstimate(e *Entry) int {
	n := 64 + len(e.Key) + len(e.Payload)
	if e.ID == "" {
		return n + 64
	}
	return n + len(e.ID)
}

// prepare builds the leaf, hashes and stored form of an entry; the stored
// form is appended to slab.
func prepare(log string, e *Entry, now time.Time, it *item, slab *[]byte) error {
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
	if n := it.leaf.Size(); n > merkle.MaxLeafSize {
		// An entry bundle carries a leaf behind a 16-bit length.
		return fmt.Errorf("leaf of %d bytes is over the %d-byte limit of an entry bundle (shorten the key or headers)", n, merkle.MaxLeafSize)
	}
	var buf [512]byte
	lb, err := it.leaf.Append(buf[:0])
	if err != nil {
		return err
	}
	it.hash = merkle.LeafHash(lb)
	it.idh = idHash(id)
	start := len(*slab)
	*slab = appendStored(*slab, &it.leaf, e.Payload, e.PayloadJSON, omitted)
	it.stored = (*slab)[start:len(*slab):len(*slab)]
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

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
//
// A log's state has one owner per concern: the appender (the request queue,
// and the writer and publisher goroutines' state), the signer (its
// goroutine, lock, pinned checkpoint and cadence) and the status flags
// (logState). Log itself holds what readers see, each published by one of
// them: the committed tree and the source position (by the publisher), the
// latest checkpoint (by the signer), and the id and leaf-hash indexes.
type Log struct {
	s    *Store
	name string
	id   uint32

	committed atomic.Pointer[treeState]
	cp        atomic.Pointer[SignedCheckpoint]
	cpMu      sync.Mutex
	cpNext    chan struct{} // closed when a new checkpoint is published
	// tail and chunks are the id and leaf-hash indexes (see index.go).
	tail   tailIndex
	chunks atomic.Uint64
	// source is the committed source position (see AppendSource).
	source atomic.Pointer[[]byte]

	st      logState
	w       appender
	signer                // embedded: tests set its pin and call sign directly
	stopped chan struct{} // closed when the writer (and the signer) have exited
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
	l := &Log{s: s, name: name, id: id, cpNext: make(chan struct{}), stopped: make(chan struct{})}
	l.st.fatal = &s.fatal
	l.w = newAppender(l)
	l.w.writer = emptyWriter()
	l.signer = newSigner(l)
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
func (l *Log) Err() error { return l.st.state().failed }

// ReadOnly returns the error appends to a read-only log get (wrapping
// ErrReadOnly, naming the integrity failure), or nil if the log is not
// read-only.
func (l *Log) ReadOnly() error { return l.st.state().readOnly }

// refusal returns why the log takes no appends: its writer failed or it is
// read-only.
func (l *Log) refusal() error { return l.st.state().refusal() }

// setReadOnly stops the log's appends and signing for good.
func (l *Log) setReadOnly(e *IntegrityError) { l.st.setReadOnly(l.name, e) }

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
	if err := l.w.submit(ctx, req); err != nil {
		return nil, err
	}
	return req.res, req.err
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
	if err := l.w.submit(context.Background(), req); err != nil {
		return err
	}
	return req.err
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

// publishCheckpoint publishes a signed checkpoint: served, and given to
// WaitCheckpoint's waiters.
func (l *Log) publishCheckpoint(scp *SignedCheckpoint) {
	l.cp.Store(scp)
	l.wakeWaiters()
}

// wakeWaiters wakes WaitCheckpoint's waiters: a checkpoint was published,
// or the log will sign none any more.
func (l *Log) wakeWaiters() {
	l.cpMu.Lock()
	close(l.cpNext)
	l.cpNext = make(chan struct{})
	l.cpMu.Unlock()
}

func (l *Log) parseCheckpoint(note []byte) (*SignedCheckpoint, error) {
	c, err := merkle.OpenCheckpoint(note, l.s.verifier, l.Origin())
	if err != nil {
		return nil, fmt.Errorf("stored checkpoint: %w", err)
	}
	return &SignedCheckpoint{Checkpoint: c, Note: append([]byte(nil), note...)}, nil
}

// Package ledger keeps auditd's append-only logs in Pebble. Each named log is
// an RFC 6962 Merkle tree over its entries: entries and payloads, tree hashes
// in C2SP tlog-tiles, an index from event id and from leaf hash to leaf index,
// and the history of its signed checkpoints.
//
// Appends to a log are grouped, written in one synced Pebble batch, and only
// then acknowledged. A checkpoint is signed when the log has grown, at most
// once per checkpoint interval, and only over durable state, so every signed
// checkpoint is consistent with every later one.
package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// Errors callers branch on.
var (
	ErrLogNotFound = errors.New("ledger: log not found")
	ErrNotFound    = errors.New("ledger: entry not found")
	ErrRange       = merkle.ErrRange
	ErrClosed      = errors.New("ledger: closed")
	ErrInvalid     = errors.New("ledger: invalid entry")
	ErrConflict    = errors.New("ledger: event id already holds different content")
	ErrLogName     = errors.New("ledger: invalid log name")
	ErrFailed      = errors.New("ledger: log failed")
	// ErrReadOnly refuses an append to a log opened read-only because its
	// storage is behind or inconsistent with a checkpoint it signed.
	ErrReadOnly = errors.New("ledger: log is read-only")
)

// ConflictError reports an event id that the log already holds with
// different content. The request that carried it was refused as a whole.
type ConflictError struct {
	Log  string
	ID   string
	Item int // position of the conflicting event in the request
	// EarlierItem is the position of an earlier event of the same request
	// with the same id and different content, or -1 when the log itself
	// holds the id, at Index.
	EarlierItem int
	Index       uint64
}

func (e *ConflictError) Error() string {
	if e.EarlierItem >= 0 {
		return fmt.Sprintf("ledger: %s: events %d and %d of the request carry id %q with different content", e.Log, e.EarlierItem, e.Item, e.ID)
	}
	return fmt.Sprintf("ledger: %s: event %d: id %q is already entry %d with different content", e.Log, e.Item, e.ID, e.Index)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TooManyLogsError refuses a new log past the bound of LogForAppendMax.
type TooManyLogsError struct {
	Log  string // the name refused
	Logs int    // the logs the store holds (or is creating)
	Max  int
}

func (e *TooManyLogsError) Error() string {
	return fmt.Sprintf("ledger: log %s not created: the store holds %d logs, its maximum is %d", e.Log, e.Logs, e.Max)
}

// validName is what a log name may be: it appears in URLs and checkpoint
// origins.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidLogName reports whether name can name a log.
func ValidLogName(name string) bool { return validName.MatchString(name) }

type options struct {
	checkpointInterval time.Duration
	maxBatch           int
	batchDelay         time.Duration
	cacheBytes         int64
	logger             *slog.Logger
	onIntegrity        func(*IntegrityError)
	checkpointDir      string
	checkpointGuardDir string
	readOnlyOnRollback bool
	diskReserve        int64
	onSpace            func(error)
	now                func() time.Time
	// tune changes the Pebble options before Open (tests: a store as an
	// earlier version wrote it).
	tune func(*pebble.Options)
}

// Option configures a Store.
type Option func(*options)

// WithCheckpointInterval sets the least time between two checkpoints of one
// log (default 100ms).
func WithCheckpointInterval(d time.Duration) Option {
	return func(o *options) { o.checkpointInterval = d }
}

// WithMaxBatch bounds the entries of one group commit (default 16384).
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// WithBatchDelay lets a group commit wait up to d for more requests after the
// first (default 0: take what is queued and commit).
func WithBatchDelay(d time.Duration) Option { return func(o *options) { o.batchDelay = d } }

// WithCacheSize sets Pebble's block cache size in bytes (default 128 MiB).
func WithCacheSize(n int64) Option { return func(o *options) { o.cacheBytes = n } }

// WithClock sets the clock that stamps the arrival time of entries that
// carry no time of their own (default time.Now). The checkpoint interval,
// batching delays and latency metrics measure elapsed time on the system's
// monotonic clock, not on this one.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Store holds many named logs in one Pebble database.
type Store struct {
	db       *pebble.DB
	signer   note.Signer
	verifier note.Verifier
	opts     options
	log      *slog.Logger
	metrics  *metrics
	quit     chan struct{}
	wg       sync.WaitGroup
	tiles    *tileCache // full upper-level tiles, shared by all logs
	big      *bigLogs   // the logs with tables of their own (tableSpan)
	dir      string
	po       *pebble.Options
	cpFiles  checkpointFiles
	storage  *storageCollector
	space    *spaceGuard // nil when off
	// fatal is set once Pebble reported a fatal write error (see
	// pebbleLogger): no log takes appends until a restart.
	fatal atomic.Pointer[error]

	mu     sync.Mutex
	logs   map[string]*Log
	nextID uint32
	closed bool
}

// Open opens (creating if needed) the store in dir. Checkpoints are signed
// with signer, whose verifier is v; a log's checkpoint origin is
// "<signer name>/<log name>".
//
// The latest checkpoint of each log is also kept in a file outside Pebble
// (see WithCheckpointDir). Open refuses, with a *RollbackError naming
// them, logs whose storage is behind or inconsistent with that checkpoint,
// and files of logs storage does not hold, unless WithReadOnlyOnRollback
// opens those logs read-only.
func Open(dir string, signer note.Signer, v note.Verifier, opts ...Option) (*Store, error) {
	if signer == nil || v == nil || signer.Name() != v.Name() || signer.KeyHash() != v.KeyHash() {
		return nil, errors.New("ledger: signer and verifier do not belong to one key")
	}
	o := options{checkpointInterval: 100 * time.Millisecond, maxBatch: 16384, cacheBytes: 128 << 20, logger: slog.Default(), now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	if o.maxBatch < 1 {
		o.maxBatch = 1
	}
	if o.now == nil {
		o.now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", dir, err)
	}
	memtable, reserve, err := spaceFor(dir, o.diskReserve)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", dir, err)
	}
	// Pebble charges memtables to the block cache, so the cache is sized
	// for both: cacheBytes for blocks plus up to two memtables.
	cache := pebble.NewCache(o.cacheBytes + 2*int64(memtable))
	defer cache.Unref()
	po := pebbleOptions()
	po.Cache, po.MemTableSize, po.Logger = cache, uint64(memtable), pebbleLogger{o.logger}
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionBalanced })
	stalls := &stallClock{}
	po.EventListener = stalls.listener()
	big := &bigLogs{}
	po.Experimental.SpanPolicyFunc = big.tableSpan
	if o.tune != nil {
		o.tune(po)
	}
	po.EnsureDefaults()
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", dir, err)
	}
	if err := markLayout(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledger: open %s: %w", dir, err)
	}
	s := &Store{db: db, dir: dir, po: po, storage: newStorageCollector(db, stalls), signer: signer, verifier: v, opts: o, log: o.logger, metrics: newMetrics(), quit: make(chan struct{}), tiles: newTileCache(), big: big, logs: map[string]*Log{}, nextID: 1}
	if reserve > 0 {
		s.space = newSpaceGuard(dir, reserve, s)
		s.space.refresh()
		if free := s.space.free.Load(); free < reserve {
			s.space.setLow(free)
		}
		s.wg.Add(1)
		go s.space.run(s.quit, &s.wg)
	}
	s.cpFiles = newCheckpointFiles(dir, &o, v)
	if err := s.loadLogs(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// markLayout records that the store may hold data of storageLayout, once.
// Code of layout 1 does not read the marker: it reports layout 2 entries as
// corrupt, so a store opened by this code is not opened by an older one.
// A layout newer than this code's is refused (readLayout).
func markLayout(db *pebble.DB) error {
	if have, err := readLayout(db); err != nil || have == storageLayout {
		return err
	}
	return db.Set([]byte{kindLayout}, binary.BigEndian.AppendUint32(nil, storageLayout), pebble.Sync)
}

// Collectors returns the ledger's Prometheus collectors.
func (s *Store) Collectors() []prometheus.Collector {
	out := append(s.metrics.collectors(), s.storage)
	if s.space != nil {
		out = append(out, s.space.collectors()...)
	}
	return out
}

// Origin returns the checkpoint origin of the named log.
func (s *Store) Origin(log string) string { return s.signer.Name() + "/" + log }

func (s *Store) loadLogs() error {
	files, err := s.cpFiles.list(s)
	if err != nil {
		return err
	}
	refused := map[*Log]*IntegrityError{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kindMeta}, UpperBound: []byte{kindMeta + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		id := binary.BigEndian.Uint32(it.Key()[1:])
		m, err := decodeMeta(it.Value())
		if err != nil {
			return fmt.Errorf("ledger: log %d metadata: %w", id, err)
		}
		l := newLog(s, m.name, id)
		l.st.persisted.Store(true)
		if err := l.load(); err != nil {
			var ie *IntegrityError
			if !errors.As(err, &ie) || (ie.Kind != IntegrityRollback && ie.Kind != IntegrityCheckpointBad && ie.Kind != IntegrityFork) {
				return fmt.Errorf("ledger: load log %s: %w", m.name, err)
			}
			refused[l] = ie
		}
		s.logs[m.name] = l
		if id >= s.nextID {
			s.nextID = id + 1
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := s.checkFiles(files, refused); err != nil {
		return err
	}
	if err := s.reopenForked(); err != nil {
		return err
	}
	for _, l := range s.logs {
		s.start(l)
	}
	return nil
}

func (s *Store) start(l *Log) {
	s.wg.Add(1)
	go l.w.run()
}

// Log returns the named log, or ErrLogNotFound.
func (s *Store) Log(name string) (*Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.logs[name]; ok && l.st.state().persisted {
		return l, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrLogNotFound, name)
}

// CreateLog returns the named log, creating it durably if it does not exist.
func (s *Store) CreateLog(name string) (*Log, error) {
	l, err := s.LogForAppend(name)
	if err != nil || l.st.state().persisted {
		return l, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(nameKey(name), binary.BigEndian.AppendUint32(nil, l.id), nil)
	_ = b.Set(metaKey(l.id), encodeMeta(logMeta{name: name, root: merkle.EmptyRoot()}), nil)
	// Through the writer, so it cannot race with a first append.
	if err := l.persist(b); err != nil {
		return nil, fmt.Errorf("ledger: create log %s: %w", name, err)
	}
	return l, nil
}

// LogForAppend returns the named log; if it does not exist, it returns a new
// log that comes into existence (is listed, survives a restart) with its
// first successful append. A request that fails leaves no trace.
func (s *Store) LogForAppend(name string) (*Log, error) {
	return s.LogForAppendMax(name, 0)
}

// LogForAppendMax is LogForAppend with a bound on the logs: a name the
// store does not hold is refused, with a *TooManyLogsError, when the store
// holds max logs or more (0 or less: no bound). Logs whose first append is
// under way count, and so do those whose first append failed since the
// store opened (they are kept for a retry), so concurrent calls never take
// the store past max. A log that exists is returned whatever the count.
func (s *Store) LogForAppendMax(name string, max int) (*Log, error) {
	if !ValidLogName(name) {
		return nil, fmt.Errorf("%w: %q (want 1-128 of A-Z a-z 0-9 . _ -, starting with a letter or digit)", ErrLogName, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if l, ok := s.logs[name]; ok {
		return l, nil
	}
	if max > 0 && len(s.logs) >= max {
		return nil, &TooManyLogsError{Log: name, Logs: len(s.logs), Max: max}
	}
	l := newLog(s, name, s.nextID)
	s.nextID++
	s.logs[name] = l
	s.start(l)
	return l, nil
}

// LogInfo summarises a log.
type LogInfo struct {
	Name string
	Size uint64
	Root merkle.Hash
}

// Logs lists the logs in name order, with their committed sizes and roots.
func (s *Store) Logs() []LogInfo {
	s.mu.Lock()
	ls := make([]*Log, 0, len(s.logs))
	for _, l := range s.logs {
		if l.st.state().persisted {
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	sort.Slice(ls, func(i, j int) bool { return ls[i].name < ls[j].name })
	out := make([]LogInfo, len(ls))
	for i, l := range ls {
		out[i] = l.Info()
	}
	return out
}

// Close stops the writers (each signs a last checkpoint if its log grew),
// then closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	s.wg.Wait()
	s.storage.close()
	return s.db.Close()
}

// Usage is the ledger's disk space.
type Usage struct {
	Total  uint64 // everything Pebble has on disk
	Tables uint64 // live sstables: the data itself
	WAL    uint64 // write-ahead log, bounded by the memtable size, not the data
	Other  uint64 // obsolete tables awaiting deletion, manifest, options
	// ByKind estimates the live table bytes of each kind of key.
	ByKind map[string]uint64
}

// DiskUsage reports the ledger's disk space, with the live table bytes of
// each kind of key (estimated from table properties of its key range).
func (s *Store) DiskUsage() (Usage, error) {
	m := s.db.Metrics()
	u := Usage{Total: m.DiskSpaceUsage(), Tables: m.Table.Local.LiveSize, WAL: m.WAL.PhysicalSize + m.WAL.ObsoletePhysicalSize, ByKind: map[string]uint64{}}
	u.Other = u.Total - u.Tables - u.WAL
	kinds := map[byte]string{kindEntry: "entries", kindIDIndex: "id index", kindHashIndex: "leaf hash index", kindTile: "tiles", kindCheckpoint: "checkpoints", kindMeta: "metadata", kindName: "names", kindChunks: "index chunks", kindSource: "source positions", kindBucket: "buckets", kindLayout: "layout version", kindLedgered: "ledgered times"}
	for k, name := range kinds {
		n, err := s.db.EstimateDiskUsage([]byte{k}, []byte{k + 1})
		if err != nil {
			return u, err
		}
		u.ByKind[name] = n
	}
	return u, nil
}

// Compact compacts the whole keyspace (used before measuring storage).
func (s *Store) Compact() error {
	return s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
}

type logMeta struct {
	name string
	size uint64
	root merkle.Hash
}

func encodeMeta(m logMeta) []byte {
	b := binary.BigEndian.AppendUint64(nil, m.size)
	b = append(b, m.root[:]...)
	return append(b, m.name...)
}

func decodeMeta(b []byte) (logMeta, error) {
	if len(b) < 8+merkle.HashSize+1 {
		return logMeta{}, errors.New("short metadata")
	}
	var m logMeta
	m.size = binary.BigEndian.Uint64(b)
	copy(m.root[:], b[8:])
	m.name = string(b[8+merkle.HashSize:])
	return m, nil
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is Pebble's report of an error it cannot go on from (a commit
// whose WAL write failed, a MANIFEST that cannot be written). Pebble's
// code after the call assumes it does not return, so it panics, with a
// *pebbleFatalError that the store's write paths recover (see
// Store.write): the store then takes no more writes, and serves what is
// durable, until a restart.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	panic(&pebbleFatalError{msg})
}

// pebbleFatalError is what pebbleLogger.Fatalf panics with.
type pebbleFatalError struct{ msg string }

func (e *pebbleFatalError) Error() string { return e.msg }

// write runs f, one of the store's Pebble writes, and turns a fatal Pebble
// error it panics with into an error: the store is marked failed (every
// log refuses appends with ErrFailed, /readyz says why) instead of the
// process dying with appends in flight. Any other panic goes on.
func (s *Store) write(f func() error) (err error) {
	if p := s.fatal.Load(); p != nil {
		return *p
	}
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		fe, ok := r.(*pebbleFatalError)
		if !ok {
			panic(r)
		}
		err = fmt.Errorf("%w: storage write failed, no log takes appends until auditd restarts (free space or fix the disk first): %v", ErrFailed, fe)
		if s.fatal.CompareAndSwap(nil, &err) {
			s.log.Error("storage failed: appends stopped until a restart", "err", fe)
		}
	}()
	return f()
}

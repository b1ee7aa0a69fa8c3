package ledger

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The disk space guard keeps the store from ever running Pebble out of
// space. Pebble treats a failed WAL write or MANIFEST update as fatal (its
// commit pipeline cannot go on), and a disk that fills while it writes
// ends in a crash or in a hot loop of failed flushes. So the store stops
// taking appends while the file system holding it has less free space than
// a reserve: enough for Pebble to finish what it has in hand (flush the
// memtables it holds, preallocate the WAL that follows, ingest an index
// chunk) and for the small writes that go on meanwhile (checkpoints of
// what is already durable, alerts, check results). Appends are refused
// with ErrNoSpace (the API's 503 "disk_full"); everything already
// acknowledged stays served; once free space is back above the reserve,
// appends resume by themselves.

// ErrNoSpace refuses an append while the file system holding the store has
// less free space than the store's reserve (WithDiskReserve). Nothing of
// the refused request was written; it may be retried once space is freed.
var ErrNoSpace = errors.New("ledger: not enough free disk space")

// WithDiskReserve sets the free space, in bytes, below which the store
// refuses appends (ErrNoSpace) until space is freed. 0 (the default)
// sizes it from the memtable: 3 memtables and 4 MiB, 52 MiB with the
// 16 MiB memtable of a file system of 512 MiB or more, 16 MiB with the
// 4 MiB memtable of a smaller one. A negative value turns the guard off.
// Open refuses to start (ErrNoSpace) with less free than a memtable and
// 4 MiB, which replaying the WAL may need.
func WithDiskReserve(n int64) Option { return func(o *options) { o.diskReserve = n } }

// WithDiskSpaceHandler sets a function told when appends stop for lack of
// space (err wraps ErrNoSpace) and when they resume (err nil). It is
// called from the guard's goroutine and must not block.
func WithDiskSpaceHandler(f func(err error)) Option { return func(o *options) { o.onSpace = f } }

const (
	spaceMargin    = 4 << 20
	spacePoll      = time.Second
	spacePollLow   = 250 * time.Millisecond
	smallMemtable  = 4 << 20
	largeMemtable  = 16 << 20
	smallFSBytes   = 512 << 20
	spaceWriteSlop = 2 // a group's stored bytes, times this, bound what it writes (entries, tiles, indexes)
)

// fsSpace reports the free (to an unprivileged writer) and total bytes of
// the file system holding dir.
func fsSpace(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// memtableFor is the memtable size of a store on a file system of total
// bytes: the usual 16 MiB, or 4 MiB on a small one, where a WAL
// preallocated for 16 MiB and a flush of as much would take most of it.
func memtableFor(total uint64) int {
	if total > 0 && total < smallFSBytes {
		return smallMemtable
	}
	return largeMemtable
}

// spaceFor returns the memtable size and disk reserve (0: no guard) of a
// store in dir given WithDiskReserve's value, or an error wrapping
// ErrNoSpace if there is too little free space to open the store at all.
func spaceFor(dir string, want int64) (memtable int, reserve uint64, err error) {
	free, total, serr := fsSpace(dir)
	if serr != nil {
		// No statfs here: the usual memtable, and no guard.
		return largeMemtable, 0, nil
	}
	memtable = memtableFor(total)
	if want < 0 {
		return memtable, 0, nil
	}
	reserve = uint64(want)
	if want == 0 {
		reserve = 3*uint64(memtable) + spaceMargin
	}
	if need := min(uint64(memtable)+spaceMargin, reserve); free < need {
		return 0, 0, fmt.Errorf("%w: the file system of %s has %s free; opening the ledger needs %s (replaying its WAL may flush a memtable): free space and start again", ErrNoSpace, dir, mib(free), mib(need))
	}
	return memtable, reserve, nil
}

// spaceGuard watches the free space of the store's file system.
type spaceGuard struct {
	dir     string
	reserve uint64
	onLow   func(error)
	log     interface {
		Error(string, ...any)
		Warn(string, ...any)
		Info(string, ...any)
	}

	free  atomic.Uint64 // at the latest statfs
	spent atomic.Int64  // bytes admitted since
	low   atomic.Pointer[error]
	mu    sync.Mutex // serializes refresh

	freeGauge, reserveGauge prometheus.Gauge
	refused                 prometheus.Counter
}

func newSpaceGuard(dir string, reserve uint64, s *Store) *spaceGuard {
	g := &spaceGuard{dir: dir, reserve: reserve, onLow: s.opts.onSpace, log: s.log,
		freeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ledger_disk_free_bytes", Help: "Free bytes of the file system holding the ledger, as the disk space guard last read them.",
		}),
		reserveGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ledger_disk_reserve_bytes", Help: "Free bytes below which the ledger refuses appends (disk_full) until space is freed.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledger_disk_full_refusals_total", Help: "Append requests refused because the ledger's file system had less free space than the reserve.",
		}),
	}
	g.reserveGauge.Set(float64(reserve))
	return g
}

func (g *spaceGuard) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.freeGauge, g.reserveGauge, g.refused}
}

// err returns why appends are refused now (wrapping ErrNoSpace), or nil.
func (g *spaceGuard) err() error {
	if g == nil {
		return nil
	}
	if p := g.low.Load(); p != nil {
		return *p
	}
	return nil
}

// admit accounts for a group commit of about n bytes and refuses it if it
// would take the free space below the reserve.
func (g *spaceGuard) admit(n int) error {
	if g == nil {
		return nil
	}
	if err := g.err(); err != nil {
		g.refused.Inc()
		return err
	}
	spent := g.spent.Add(int64(n) * spaceWriteSlop)
	if int64(g.free.Load())-spent >= int64(g.reserve) {
		return nil
	}
	// The estimate says low: read the file system again before refusing.
	g.refresh()
	spent = g.spent.Add(int64(n) * spaceWriteSlop)
	if int64(g.free.Load())-spent >= int64(g.reserve) {
		return nil
	}
	g.setLow(g.free.Load())
	g.refused.Inc()
	return g.err()
}

// small admits one of the small writes that go on while appends are
// refused (alerts, check results) down to a quarter of the reserve, which
// leaves Pebble the rest.
func (g *spaceGuard) small(n int) error {
	if g == nil {
		return nil
	}
	floor := int64(g.reserve / 4)
	if int64(g.free.Load())-g.spent.Add(int64(n)*spaceWriteSlop) >= floor {
		return nil
	}
	g.refresh()
	if free := g.free.Load(); int64(free)-int64(n)*spaceWriteSlop < floor {
		return fmt.Errorf("%w: the file system of %s has %s free", ErrNoSpace, g.dir, mib(free))
	}
	return nil
}

// refresh reads the file system's free space and clears the bytes admitted
// since the last read (they are in it now, or in preallocated WAL space).
func (g *spaceGuard) refresh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	free, _, err := fsSpace(g.dir)
	if err != nil {
		g.log.Warn("disk space guard: statfs failed", "dir", g.dir, "err", err)
		return
	}
	g.free.Store(free)
	g.spent.Store(0)
	g.freeGauge.Set(float64(free))
}

func (g *spaceGuard) setLow(free uint64) {
	err := fmt.Errorf("%w: the file system of %s has %s free, below the ledger's %s reserve; appends resume once space is freed", ErrNoSpace, g.dir, mib(free), mib(g.reserve))
	if g.low.CompareAndSwap(nil, &err) {
		g.log.Error("appends refused: disk nearly full", "dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve)
		if g.onLow != nil {
			g.onLow(err)
		}
	}
}

// run polls the free space until quit closes, and lets appends resume once
// it is back above the reserve (by a quarter of it, so that appends do not
// flap around the line).
func (g *spaceGuard) run(quit <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTimer(spacePoll)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		g.refresh()
		free := g.free.Load()
		switch {
		case g.low.Load() == nil && free < g.reserve:
			g.setLow(free)
		case g.low.Load() != nil && free >= g.reserve+g.reserve/4:
			g.low.Store(nil)
			g.log.Info("disk space recovered: appends resume", "dir", g.dir, "free_bytes", free, "reserve_bytes", g.reserve)
			if g.onLow != nil {
				g.onLow(nil)
			}
		}
		if g.low.Load() != nil {
			t.Reset(spacePollLow)
		} else {
			t.Reset(spacePoll)
		}
	}
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// NoSpace returns why the store refuses appends for lack of disk space
// (wrapping ErrNoSpace), or nil while it takes them.
func (s *Store) NoSpace() error { return s.space.err() }

package ledger

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// stallClock counts Pebble's write stalls (writes held back because
// flushes or L0 compactions fall behind) and their time, from its event
// listener.
type stallClock struct {
	count atomic.Int64
	mu    sync.Mutex
	began time.Time     // zero when no stall is on
	total time.Duration // of the stalls that ended
}

func (c *stallClock) listener() *pebble.EventListener {
	return &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			c.count.Add(1)
			c.mu.Lock()
			c.began = time.Now()
			c.mu.Unlock()
		},
		WriteStallEnd: func() {
			c.mu.Lock()
			if !c.began.IsZero() {
				c.total += time.Since(c.began)
				c.began = time.Time{}
			}
			c.mu.Unlock()
		},
	}
}

// seconds returns the stalled time so far, the stall going on included.
func (c *stallClock) seconds() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.total
	if !c.began.IsZero() {
		d += time.Since(c.began)
	}
	return d.Seconds()
}

// storageCollector reports the state of the store's Pebble database when
// scraped: what an operator needs to see that storage keeps up with
// ingestion (stalls, L0 build-up, compaction debt) and what it costs in
// bytes written and held.
type storageCollector struct {
	mu     sync.RWMutex
	db     *pebble.DB // nil once the store closes
	stalls *stallClock

	stallCount, stallSeconds, l0Sublevels, l0Tables, debt, compactions, written, disk *prometheus.Desc
}

func newStorageCollector(db *pebble.DB, stalls *stallClock) *storageCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("ledger_storage_"+name, help, labels, nil)
	}
	return &storageCollector{
		db: db, stalls: stalls,
		stallCount:   d("write_stalls_total", "Times Pebble held writes back because flushes or L0 compactions fell behind."),
		stallSeconds: d("write_stall_seconds_total", "Time writes were held back by Pebble's write stalls."),
		l0Sublevels:  d("l0_sublevels", "Sublevels of Pebble's L0 (its read amplification); writes stall at 20."),
		l0Tables:     d("l0_tables", "Tables in Pebble's L0."),
		debt:         d("compaction_debt_bytes", "Pebble's estimate of the bytes compactions must still rewrite to reach a stable shape."),
		compactions:  d("compactions_total", "Pebble compactions, by kind: move (a table moved down a level, no bytes rewritten) or rewrite.", "kind"),
		written:      d("written_bytes_total", "Bytes Pebble wrote, by what for: wal, flush (memtables to L0), compaction, ingest (index chunks).", "what"),
		disk:         d("disk_usage_bytes", "Disk space of the Pebble database (tables, WAL, manifests)."),
	}
}

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.stallCount, c.stallSeconds, c.l0Sublevels, c.l0Tables, c.debt, c.compactions, c.written, c.disk} {
		ch <- d
	}
}

// close stops the collector's reads of the database, before it closes.
func (c *storageCollector) close() {
	c.mu.Lock()
	c.db = nil
	c.mu.Unlock()
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	if c.db == nil {
		c.mu.RUnlock()
		return
	}
	m := c.db.Metrics()
	c.mu.RUnlock()
	var flushed, compacted, ingested uint64
	for i := range m.Levels {
		l := &m.Levels[i]
		flushed += l.TableBytesFlushed
		compacted += l.TableBytesCompacted
		ingested += l.TableBytesIngested
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(c.stallCount, counter, float64(c.stalls.count.Load()))
	ch <- prometheus.MustNewConstMetric(c.stallSeconds, counter, c.stalls.seconds())
	ch <- prometheus.MustNewConstMetric(c.l0Sublevels, gauge, float64(m.Levels[0].Sublevels))
	ch <- prometheus.MustNewConstMetric(c.l0Tables, gauge, float64(m.Levels[0].TablesCount))
	ch <- prometheus.MustNewConstMetric(c.debt, gauge, float64(m.Compact.EstimatedDebt))
	ch <- prometheus.MustNewConstMetric(c.compactions, counter, float64(m.Compact.MoveCount), "move")
	ch <- prometheus.MustNewConstMetric(c.compactions, counter, float64(m.Compact.Count-m.Compact.MoveCount), "rewrite")
	ch <- prometheus.MustNewConstMetric(c.written, counter, float64(m.WAL.BytesWritten), "wal")
	ch <- prometheus.MustNewConstMetric(c.written, counter, float64(flushed), "flush")
	ch <- prometheus.MustNewConstMetric(c.written, counter, float64(compacted), "compaction")
	ch <- prometheus.MustNewConstMetric(c.written, counter, float64(ingested), "ingest")
	ch <- prometheus.MustNewConstMetric(c.disk, gauge, float64(m.DiskSpaceUsage()))
}

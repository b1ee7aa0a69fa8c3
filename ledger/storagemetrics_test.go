package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
)

// The storage metrics show what Pebble does under the ledger. Table writes
// are slowed and the memtable made small, so that appends outrun flushes:
// the stall counters must see that, the byte counters the WAL and the
// flushes, and a scrape after Close must neither panic nor report.
func TestStorageMetrics(t *testing.T) {
	t.Parallel()
	slow := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".sst") {
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
	s, _ := newTestStore(t, WithCheckpointInterval(0), func(o *options) {
		o.tune = func(po *pebble.Options) {
			po.FS = errorfs.Wrap(vfs.Default, slow)
			po.MemTableSize = 256 << 10
			po.MemTableStopWritesThreshold = 2
		}
	})
	l := mustCreateLog(t, s, "m")
	payload := []byte(strings.Repeat("x", 1000))
	for b := range 40 {
		es := make([]Entry, 256)
		for i := range es {
			es[i] = Entry{ID: fmt.Sprintf("m-%d-%d", b, i), Payload: payload}
		}
		mustAppend(t, l, es...)
	}
	if n := metricValue(t, s, "ledger_storage_write_stalls_total"); n < 1 {
		t.Errorf("write stalls %v, want at least 1 with 10 MB through a 256 KiB memtable over a slow disk", n)
	}
	if sec := metricValue(t, s, "ledger_storage_write_stall_seconds_total"); sec <= 0 {
		t.Errorf("write stall seconds %v, want > 0", sec)
	}
	wal := metricValue(t, s, "ledger_storage_written_bytes_total", "what", "wal")
	flush := metricValue(t, s, "ledger_storage_written_bytes_total", "what", "flush")
	if wal < 10<<20 || flush <= 0 {
		t.Errorf("written bytes: wal %v (want >= 10 MiB of payloads), flush %v", wal, flush)
	}
	if d := metricValue(t, s, "ledger_storage_disk_usage_bytes"); d <= 0 {
		t.Errorf("disk usage %v", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "ledger_storage_") {
			t.Errorf("closed store reports %s", mf.GetName())
		}
	}
}

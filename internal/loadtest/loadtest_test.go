package loadtest

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestPctNearestRankBelow(t *testing.T) {
	var l Latencies
	if got := l.Pct(.5); got != 0 {
		t.Fatalf("Pct of nothing = %v, want 0", got)
	}
	// 1..100 ms added out of order.
	ms := make([]int, 100)
	for i := range ms {
		ms[i] = i + 1
	}
	for i := range ms {
		j := (i * 37) % len(ms)
		ms[i], ms[j] = ms[j], ms[i]
	}
	for _, m := range ms {
		l.Add(time.Duration(m) * time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{
		{0, 1 * time.Millisecond},     // index 0
		{.5, 50 * time.Millisecond},   // index floor(.5*99) = 49
		{.99, 99 * time.Millisecond},  // index floor(.99*99) = 98
		{1, 100 * time.Millisecond},   // index 99
		{.255, 26 * time.Millisecond}, // index floor(25.245) = 25
	} {
		if got := l.Pct(c.p); got != c.want {
			t.Errorf("Pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if l.Len() != 100 {
		t.Errorf("Len = %d, want 100", l.Len())
	}
	var m Latencies
	m.Add(time.Hour)
	m.Merge(&l)
	if m.Len() != 101 || m.Pct(1) != time.Hour || m.Pct(0) != time.Millisecond {
		t.Errorf("Merge: %d durations, max %v, min %v", m.Len(), m.Pct(1), m.Pct(0))
	}
}

func TestLatenciesConcurrentAdds(t *testing.T) {
	var l Latencies
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				l.Add(time.Duration(w*1000 + i))
			}
		})
	}
	wg.Wait()
	if l.Len() != 8000 || l.Pct(0) != 0 || l.Pct(1) != 7999 {
		t.Fatalf("%d durations from %v to %v, want 8000 from 0 to 7999", l.Len(), l.Pct(0), l.Pct(1))
	}
}

func TestMS(t *testing.T) {
	if got := MS(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("MS(1.5ms) = %v", got)
	}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestEventGenIDs(t *testing.T) {
	g := NewEventGen(1, 256, false)
	seen := map[string]bool{}
	for range 10_000 {
		id := g.ID()
		if !uuidV4.MatchString(id) {
			t.Fatalf("id %q is not a version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("id %q repeats", id)
		}
		seen[id] = true
	}
}

func TestEventGenJSONPayloads(t *testing.T) {
	for _, size := range []int{16, 40, 64, 256, 4096} {
		g := NewEventGen(uint64(size), size, false)
		for range 100 {
			p, isJSON := g.Payload()
			if !isJSON {
				t.Fatal("a JSON payload says it is not JSON")
			}
			var v struct {
				Account string `json:"account"`
				Amount  int    `json:"amount"`
				Pad     string `json:"pad"`
			}
			if err := json.Unmarshal(p, &v); err != nil {
				t.Fatalf("size %d: %q: %v", size, p, err)
			}
			// Below the fields' own length the payload is just the fields.
			if size >= 64 && len(p) != size {
				t.Fatalf("size %d: payload of %d bytes", size, len(p))
			}
			if len(p) < size || v.Account == "" {
				t.Fatalf("size %d: %q", size, p)
			}
		}
	}
}

func TestEventGenRandomPayloadsAndSeeds(t *testing.T) {
	a, b, c := NewEventGen(7, 300, true), NewEventGen(7, 300, true), NewEventGen(8, 300, true)
	pa, isJSON := a.Payload()
	pb, _ := b.Payload()
	pc, _ := c.Payload()
	if isJSON || len(pa) != 300 {
		t.Fatalf("random payload: JSON %v, %d bytes", isJSON, len(pa))
	}
	if !slices.Equal(pa, pb) || a.ID() != b.ID() {
		t.Error("two generators of one seed differ")
	}
	if slices.Equal(pa, pc) {
		t.Error("generators of two seeds make the same payload")
	}
}

// at is a fixed clock: t0 plus ms milliseconds.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestTrackerAckBeforeCheckpoint(t *testing.T) {
	var tr CheckpointTracker
	tr.Acked(10, at(0))  // entries 0..9
	tr.Acked(20, at(5))  // 10..19
	tr.Acked(30, at(10)) // 20..29
	if tr.Waiting() != 3 {
		t.Fatalf("waiting %d, want 3", tr.Waiting())
	}
	tr.Checkpoint(20, at(50)) // covers the first two
	if tr.Waiting() != 1 {
		t.Fatalf("waiting %d after a checkpoint of 20, want 1", tr.Waiting())
	}
	tr.Checkpoint(15, at(60)) // older, seen late: covers nothing new
	if tr.Waiting() != 1 {
		t.Fatalf("waiting %d after an older checkpoint, want 1", tr.Waiting())
	}
	tr.Checkpoint(30, at(100))
	if tr.Waiting() != 0 {
		t.Fatalf("waiting %d, want 0", tr.Waiting())
	}
	l := tr.Latencies()
	if l.Len() != 3 || l.Pct(0) != 45*time.Millisecond || l.Pct(.5) != 50*time.Millisecond || l.Pct(1) != 90*time.Millisecond {
		t.Fatalf("latencies: %d, min %v, median %v, max %v; want 45, 50, 90 ms", l.Len(), l.Pct(0), l.Pct(.5), l.Pct(1))
	}
}

func TestTrackerCheckpointBeforeAck(t *testing.T) {
	var tr CheckpointTracker
	// The watcher saw the checkpoint of 40 at 30 ms; the add that started
	// at 0 ms and ended at size 25 is acked only later.
	tr.Checkpoint(40, at(30))
	tr.Acked(25, at(0))
	tr.Acked(40, at(10))
	tr.Acked(41, at(20)) // not covered yet
	if tr.Waiting() != 1 {
		t.Fatalf("waiting %d, want 1", tr.Waiting())
	}
	l := tr.Latencies()
	if l.Len() != 2 || l.Pct(0) != 20*time.Millisecond || l.Pct(1) != 30*time.Millisecond {
		t.Fatalf("latencies: %d from %v to %v; want 20 and 30 ms", l.Len(), l.Pct(0), l.Pct(1))
	}
}

func TestDriveRunsEachJobOnce(t *testing.T) {
	const jobs = 1000
	var runs [jobs]atomic.Int32
	var workers sync.Map
	_, err := Drive("test", 4, jobs, 1, func(w, j int) error {
		runs[j].Add(1)
		workers.Store(w, true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for j := range runs {
		if n := runs[j].Load(); n != 1 {
			t.Fatalf("job %d ran %d times", j, n)
		}
	}
	workers.Range(func(k, _ any) bool {
		if w := k.(int); w < 0 || w >= 4 {
			t.Errorf("worker %d out of 0..3", w)
		}
		return true
	})
}

func TestDriveStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	var ran atomic.Int32
	_, err := Drive("test", 1, 100, 1, func(_, j int) error {
		ran.Add(1)
		if j == 9 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if n := ran.Load(); n != 10 {
		t.Fatalf("one worker ran %d jobs, want 10 (stop at the failing one)", n)
	}
}

func TestStatusKB(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	os.WriteFile(p, []byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t    1024 kB\n"), 0o600)
	if got := StatusKB(p, "VmRSS"); got != 1024<<10 {
		t.Errorf("VmRSS = %d, want %d", got, 1024<<10)
	}
	if got := StatusKB(p, "VmHWM"); got != 2048<<10 {
		t.Errorf("VmHWM = %d", got)
	}
	if got := StatusKB(p, "VmSwap"); got != 0 {
		t.Errorf("a missing field = %d, want 0", got)
	}
	if got := StatusKB(filepath.Join(t.TempDir(), "none"), "VmRSS"); got != 0 {
		t.Errorf("a missing file = %d, want 0", got)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil && SelfStatusKB("VmRSS") <= 0 {
		t.Error("this process's VmRSS is not positive")
	}
}

func TestLoadAvg(t *testing.T) {
	p := filepath.Join(t.TempDir(), "loadavg")
	os.WriteFile(p, []byte("0.52 1.25 2.00 3/456 7890\n"), 0o600)
	if got := loadAvg(p, 1); got != "0.52" {
		t.Errorf("1 field: %q", got)
	}
	if got := loadAvg(p, 3); got != "0.52 1.25 2.00" {
		t.Errorf("3 fields: %q", got)
	}
	if got := loadAvg(filepath.Join(t.TempDir(), "none"), 3); got != "?" {
		t.Errorf("no file: %q", got)
	}
}

func bucket(le float64, n uint64) *dto.Bucket {
	return &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCount: proto.Uint64(n)}
}

func TestBucketQuantile(t *testing.T) {
	// 100 samples: 10 at or below 1, 50 at or below 2, 90 at or below 4,
	// all at or below +Inf. Buckets given out of order.
	h := &dto.Histogram{SampleCount: proto.Uint64(100), Bucket: []*dto.Bucket{
		bucket(4, 90), bucket(1, 10), bucket(math.Inf(1), 100), bucket(2, 50),
	}}
	for _, c := range []struct{ q, want float64 }{
		{.05, 0.5}, // rank 5 in (0, 1]: 0 + 1*5/10
		{.1, 1},    // rank 10: the bound
		{.3, 1.5},  // rank 30 in (1, 2]: 1 + 1*20/40
		{.7, 3},    // rank 70 in (2, 4]: 2 + 2*20/40
		{.95, 4},   // beyond the last finite bucket: its bound
	} {
		got := BucketQuantile(h, c.q)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q %v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := BucketQuantile(&dto.Histogram{}, .5); !math.IsNaN(got) {
		t.Errorf("no samples = %v, want NaN", got)
	}
}

// HistQuantile reads a histogram as client_golang gathers it, whose +Inf
// bucket is implicit.
func TestHistQuantileGathered(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Buckets: []float64{1, 2, 4}})
	reg.MustRegister(h)
	for range 10 {
		h.Observe(0.5)
	}
	for range 40 {
		h.Observe(1.5)
	}
	for range 40 {
		h.Observe(3)
	}
	for range 10 {
		h.Observe(100)
	}
	for _, c := range []struct{ q, want float64 }{{.05, .5}, {.3, 1.5}, {.7, 3}, {.95, 4}} {
		if got := HistQuantile(reg, "x_seconds", c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q %v = %v, want %v", c.q, got, c.want)
		}
	}
	if got := HistQuantile(reg, "no_such", .5); !math.IsNaN(got) {
		t.Errorf("a missing histogram = %v, want NaN", got)
	}
}

// TestTrackerFromAck times adds from their acks: one acked before its
// checkpoint, one whose checkpoint was seen before its ack arrived (0),
// and one Acked without an ack time (not timed from the ack).
func TestTrackerFromAck(t *testing.T) {
	var tr CheckpointTracker
	tr.AckedAt(10, at(0), at(20)) // covered at 50: 30 ms after its ack
	tr.Checkpoint(10, at(50))
	tr.Checkpoint(30, at(60))
	tr.AckedAt(30, at(40), at(70)) // covered before the ack arrived
	tr.Acked(30, at(45))
	fa := tr.FromAck()
	if fa.Len() != 2 || fa.Pct(0) != 0 || fa.Pct(1) != 30*time.Millisecond {
		t.Fatalf("ack to checkpoint: %d from %v to %v; want 2, from 0 to 30 ms", fa.Len(), fa.Pct(0), fa.Pct(1))
	}
	if l := tr.Latencies(); l.Len() != 3 {
		t.Fatalf("start to checkpoint: %d latencies, want 3", l.Len())
	}
}

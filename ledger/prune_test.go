package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/auditd/auditd/merkle"
)

// fillPrune appends n entries (ids p-0.., payloads of size bytes, one
// event time per entry from base, a second apart) in requests of 700 and
// waits for the checkpoint of the whole log.
func fillPrune(t testing.TB, l *Log, n, size int, base time.Time) {
	t.Helper()
	for next := 0; next < n; {
		k := min(700, n-next)
		es := make([]Entry, k)
		for j := range es {
			i := next + j
			p := make([]byte, size)
			_, _ = rand.Read(p)
			es[j] = Entry{ID: fmt.Sprintf("p-%d", i), Payload: p, Time: base.Add(time.Duration(i) * time.Second)}
		}
		mustAppend(t, l, es...)
		next += k
	}
	if _, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), uint64(n)); err != nil {
		t.Fatal(err)
	}
}

// checkPruned reads every entry through the serving path (which checks
// each leaf against the tree) and wants payloads below wm gone, the rest
// kept, and the same leaf hashes as before.
func checkPruned(t testing.TB, l *Log, wm uint64, leaves []merkle.Hash) {
	t.Helper()
	for i := range uint64(len(leaves)) {
		rec, err := l.Entry(i)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if rec.PayloadPruned != (i < wm) || (rec.Payload == nil) != (i < wm) {
			t.Fatalf("entry %d: pruned %v, payload %d bytes; watermark %d", i, rec.PayloadPruned, len(rec.Payload), wm)
		}
		if rec.LeafHash != leaves[i] {
			t.Fatalf("entry %d: leaf hash %s after pruning, %s before", i, rec.LeafHash, leaves[i])
		}
	}
}

func leavesOf(t testing.TB, l *Log) []merkle.Hash {
	t.Helper()
	var out []merkle.Hash
	for i := range l.Size() {
		out = append(out, mustEntry(t, l, i).LeafHash)
	}
	return out
}

func TestPrunePayloadsKeepsLeavesAndProofs(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "pr")
	fillPrune(t, l, 3000, 64, time.Unix(1e9, 0))
	leaves := leavesOf(t, l)
	root := mustRootAt(t, l, 3000)
	byID := mustEntry(t, l, 1500)
	ten := mustEntry(t, l, 10)
	res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 2000, BatchSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 0 || res.To != 2000 || res.Pruned != 2000 || res.PayloadBytes != 2000*64 || res.Limit != 3000 {
		t.Fatalf("prune result %+v, want 0..2000, 2000 entries of 64 bytes, limit 3000", res)
	}
	if wm, err := l.PruneWatermark(); err != nil || wm != 2000 {
		t.Fatalf("watermark %d, %v; want 2000", wm, err)
	}
	checkPruned(t, l, 2000, leaves)
	verifyInclusionAll(t, l, 3000, leaves, root)
	// The id and leaf-hash indexes still find a pruned entry.
	if rec, err := l.EntryByID(byID.Leaf.ID); err != nil || rec.Index != 1500 || !rec.PayloadPruned {
		t.Fatalf("EntryByID(%s): %+v, %v", byID.Leaf.ID, rec, err)
	}
	if i, err := l.IndexByLeafHash(leaves[1999]); err != nil || i != 1999 {
		t.Fatalf("IndexByLeafHash: %d, %v", i, err)
	}
	// Appending a pruned event again is a duplicate, not a conflict: the
	// leaf still commits to the payload's hash.
	again := Entry{ID: "p-10", Payload: ten.Payload, Time: time.Unix(1e9, 0).Add(10 * time.Second)}
	if r := mustAppend(t, l, again); !r.Entries[0].Duplicate || r.Entries[0].Index != 10 {
		t.Fatalf("append of pruned p-10 again: %+v, want a duplicate of entry 10", r.Entries[0])
	}
	again.Payload = []byte("other")
	if _, err := l.Append(context.Background(), []Entry{again}); !errors.Is(err, ErrConflict) {
		t.Fatalf("append of pruned p-10 with another payload: %v, want a conflict", err)
	}
	// The same again, after a restart: the watermark and entries are durable.
	s = reopen(t, s)
	l = mustLog(t, s, "pr")
	checkPruned(t, l, 2000, leaves)
	if mustRootAt(t, l, 3000) != root {
		t.Fatal("root changed after pruning")
	}
	// The memory index, rebuilt on open from the pruned entries, finds them.
	if rec, err := l.EntryByID(byID.Leaf.ID); err != nil || rec.Index != 1500 {
		t.Fatalf("EntryByID(%s) after reopen: %+v, %v", byID.Leaf.ID, rec, err)
	}
	if i, err := l.IndexByLeafHash(leaves[7]); err != nil || i != 7 {
		t.Fatalf("IndexByLeafHash after reopen: %d, %v", i, err)
	}
}

func TestPruneStopsAtSignedCheckpoint(t *testing.T) {
	s, _ := newTestStore(t, WithCheckpointInterval(time.Hour))
	l := mustCreateLog(t, s, "cp")
	fillPrune(t, l, 300, 16, time.Unix(1e9, 0))
	// The interval keeps the next 300 out of any checkpoint.
	for i := range 300 {
		mustAppend(t, l, Entry{ID: fmt.Sprintf("late-%d", i), Payload: []byte("x")})
	}
	if cp := l.Checkpoint(); cp.Size != 300 || l.Size() != 600 {
		t.Fatalf("checkpoint %d, size %d: want 300, 600", cp.Size, l.Size())
	}
	res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 600})
	if err != nil {
		t.Fatal(err)
	}
	if res.To != 300 || res.Limit != 300 || res.Pruned != 300 {
		t.Fatalf("prune result %+v: want it to stop at the checkpoint, 300", res)
	}
	if rec := mustEntry(t, l, 300); rec.PayloadPruned {
		t.Fatal("entry 300, past the signed checkpoint, was pruned")
	}
}

func TestPruneByTimeIsAPrefix(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "tm")
	base := time.Unix(1e9, 0)
	fillPrune(t, l, 1100, 8, base)
	// An old event after the new ones keeps its payload: pruning is a prefix.
	mustAppend(t, l, Entry{ID: "old", Payload: []byte("o"), Time: base})
	if _, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 1101); err != nil {
		t.Fatal(err)
	}
	leaves := leavesOf(t, l)
	res, err := l.PrunePayloads(context.Background(), PruneOptions{OlderThan: base.Add(1030 * time.Second), BatchSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	if res.To != 1030 || res.Pruned != 1030 {
		t.Fatalf("prune result %+v, want the 1030 entries older than the cutoff", res)
	}
	checkPruned(t, l, 1030, leaves)
}

func TestPruneDryRunWritesNothing(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "dry")
	fillPrune(t, l, 500, 8, time.Unix(1e9, 0))
	leaves := leavesOf(t, l)
	res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 400, DryRun: true})
	if err != nil || res.To != 400 || res.Pruned != 400 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	checkPruned(t, l, 0, leaves)
	if wm, _ := l.PruneWatermark(); wm != 0 {
		t.Fatalf("dry run moved the watermark to %d", wm)
	}
}

// A prune that stops between two batches (a crash: the hook fails after
// the first batch is durable) leaves a watermark matching the entries on
// disk; reopened, pruning again resumes from it and ends where one prune
// would have.
func TestPruneResumesAfterCrash(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "crash")
	fillPrune(t, l, 3000, 32, time.Unix(1e9, 0))
	leaves := leavesOf(t, l)
	crash := errors.New("crash")
	o := PruneOptions{Before: 2500, BatchSize: 1024, afterBatch: func(wm uint64) error {
		if wm == 1024 {
			return crash
		}
		return nil
	}}
	if _, err := l.PrunePayloads(context.Background(), o); !errors.Is(err, crash) {
		t.Fatalf("prune: %v, want the hook's crash", err)
	}
	s = reopen(t, s)
	l = mustLog(t, s, "crash")
	if wm, err := l.PruneWatermark(); err != nil || wm != 1024 {
		t.Fatalf("watermark after the crash: %d, %v; want 1024", wm, err)
	}
	checkPruned(t, l, 1024, leaves)
	res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 2500, BatchSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 1024 || res.To != 2500 || res.Pruned != 2500-1024 {
		t.Fatalf("resumed prune %+v, want 1024..2500", res)
	}
	// Idempotent: once more prunes nothing.
	if res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 2500}); err != nil || res.Pruned != 0 || res.To != 2500 {
		t.Fatalf("prune again: %+v, %v", res, err)
	}
	checkPruned(t, l, 2500, leaves)
}

// Pruning a log fed by a source (Kafka) leaves its source position as it
// was, in memory and in storage.
func TestPruneKeepsSourcePosition(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "kafka.0")
	pos := []byte("topic-id:offset=1200")
	var es []Entry
	for i := range 1200 {
		es = append(es, Entry{Payload: []byte(fmt.Sprintf("rec %d", i)), Source: &merkle.Source{Topic: "t", Partition: 0, Offset: int64(i)}})
	}
	if _, err := l.AppendSource(context.Background(), es, pos); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 1200); err != nil {
		t.Fatal(err)
	}
	stored := func() []byte {
		v, closer, err := s.db.Get(sourceKey(l.id))
		if err != nil {
			t.Fatal(err)
		}
		defer closer.Close()
		return bytes.Clone(v)
	}
	before := stored()
	if res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 1200}); err != nil || res.Pruned != 1200 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	if got := l.SourcePosition(); !bytes.Equal(got, pos) {
		t.Fatalf("source position %q after pruning, want %q", got, pos)
	}
	if got := stored(); !bytes.Equal(got, before) {
		t.Fatalf("stored source position %x after pruning, was %x", got, before)
	}
	s = reopen(t, s)
	if got := mustLog(t, s, "kafka.0").SourcePosition(); !bytes.Equal(got, pos) {
		t.Fatalf("source position %q after reopen, want %q", got, pos)
	}
}

// A payload that no longer hashes to its leaf is not pruned: that would
// launder the corruption into a pruned entry whose stored hash is wrong.
func TestPruneRefusesCorruptPayload(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "bad")
	fillPrune(t, l, 600, 16, time.Unix(1e9, 0))
	k := entryKey(l.id, 300)
	v, closer, err := s.db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	v = bytes.Clone(v)
	closer.Close()
	v[len(v)-1] ^= 1
	if err := s.db.Set(k, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 600, BatchSize: 256})
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.Kind != IntegrityLeafMismatch || ie.Index != 300 {
		t.Fatalf("prune over a corrupt payload: %v, want a leaf mismatch at 300", err)
	}
	if res.To != 256 {
		t.Fatalf("watermark %d, want the batch before the bad entry, 256", res.To)
	}
}

func TestRetentionPolicies(t *testing.T) {
	s, _ := newTestStore(t)
	base := time.Unix(1e9, 0)
	a := mustCreateLog(t, s, "keep.a")
	fillPrune(t, a, 1500, 8, base)
	b := mustCreateLog(t, s, "age")
	fillPrune(t, b, 1500, 8, base)
	c := mustCreateLog(t, s, "other")
	fillPrune(t, c, 100, 8, base)
	now := base.Add(2000 * time.Second)
	r := NewRetention(s, []RetentionPolicy{{Log: "keep.*", KeepEntries: 200}, {Log: "age", MaxAge: 1000 * time.Second}},
		WithRetentionClock(func() time.Time { return now }), WithRetentionBatch(512),
		WithRetentionLogger(slog.New(slog.DiscardHandler)))
	if err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		l  *Log
		wm uint64
	}{{a, 1300}, {b, 1000}, {c, 0}} {
		if wm, err := w.l.PruneWatermark(); err != nil || wm != w.wm {
			t.Errorf("%s: watermark %d, %v; want %d", w.l.Name(), wm, err, w.wm)
		}
	}
	if got := gaugeOrCounter(t, r.pruned.WithLabelValues("keep.a")); got != 1300 {
		t.Errorf("pruned entries metric of keep.a: %v, want 1300", got)
	}
	if got := gaugeOrCounter(t, r.watermark.WithLabelValues("age")); got != 1000 {
		t.Errorf("watermark metric of age: %v, want 1000", got)
	}
}

// Pruning reclaims the disk space of the payloads it removes: the entries'
// share of the sstables shrinks with pruning's own compaction of the range.
func TestPruneReclaimsSpace(t *testing.T) {
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "space")
	fillPrune(t, l, 20000, 1024, time.Unix(1e9, 0))
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	entries := func() uint64 {
		u, err := s.DiskUsage()
		if err != nil {
			t.Fatal(err)
		}
		return u.ByKind["entries"]
	}
	before := entries()
	if res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 20000}); err != nil || res.Pruned != 20000 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	after := entries()
	t.Logf("entries: %d -> %d bytes", before, after)
	if after > before/4 {
		t.Fatalf("entries take %d bytes after pruning 20,000 payloads of 1 KiB, %d before: space not reclaimed", after, before)
	}
}

// BenchmarkPruneDiskUsage1M measures the disk space of a log of 1M
// entries with 256-byte incompressible payloads before and after pruning
// them all, and the pruning rate (the timed part is the prune, compaction
// included). Each iteration builds its own log: run it with -benchtime 1x
// (about a minute): go test -run '^$' -bench PruneDiskUsage1M -benchtime 1x ./ledger/
func BenchmarkPruneDiskUsage1M(b *testing.B) {
	const n = 1 << 20
	var reclaimed float64
	for range b.N {
		b.StopTimer()
		s, _ := newTestStore(b)
		l := mustCreateLog(b, s, "big")
		ctx := context.Background()
		for next := 0; next < n; next += 8192 {
			es := make([]Entry, 8192)
			for j := range es {
				p := make([]byte, 256)
				_, _ = rand.Read(p)
				es[j] = Entry{ID: fmt.Sprintf("e-%d", next+j), Payload: p}
			}
			if _, err := l.Append(ctx, es); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := l.WaitCheckpoint(testCtx(b, time.Minute), n); err != nil {
			b.Fatal(err)
		}
		usage := func(when string, compact bool) uint64 {
			if err := s.Compact(); compact && err != nil {
				b.Fatal(err)
			}
			u, err := s.DiskUsage()
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: total %d bytes, tables %d, entries %d", when, u.Total, u.Tables, u.ByKind["entries"])
			return u.Tables
		}
		before := usage("before pruning, compacted", true)
		b.StartTimer()
		res, err := l.PrunePayloads(ctx, PruneOptions{Before: n})
		b.StopTimer()
		if err != nil || res.Pruned != n {
			b.Fatalf("prune: %+v, %v", res, err)
		}
		after := usage("after pruning (its own compaction only)", false)
		usage("after pruning and a full compaction", true)
		if after >= before {
			b.Fatalf("pruning reclaimed nothing: %d -> %d bytes", before, after)
		}
		reclaimed = 100 * float64(before-after) / float64(before)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(reclaimed, "%reclaimed")
}

func gaugeOrCounter(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// BenchmarkPruneIngestLatency measures what pruning costs the appends of
// another log: the p99 latency of 100-entry appends alone, beside an
// unbounded prune, and beside a prune at the retention default of 50,000
// entries/s (metrics p99-alone-ms, p99-unbounded-ms, p99-50k-ms; the log
// has the p50 and max too). Each iteration builds its own logs: run it
// with -benchtime 1x: go test -run '^$' -bench PruneIngestLatency -benchtime 1x ./ledger/
func BenchmarkPruneIngestLatency(b *testing.B) {
	for range b.N {
		pruneIngestLatency(b)
	}
}

func pruneIngestLatency(t *testing.B) {
	const n = 1 << 18
	s, _ := newTestStore(t)
	old := mustCreateLog(t, s, "old")
	for next := 0; next < 3*n; next += 8192 {
		es := make([]Entry, 8192)
		for j := range es {
			p := make([]byte, 256)
			_, _ = rand.Read(p)
			es[j] = Entry{ID: fmt.Sprintf("e-%d", next+j), Payload: p}
		}
		mustAppend(t, old, es...)
	}
	if _, err := old.WaitCheckpoint(testCtx(t, time.Minute), 3*n); err != nil {
		t.Fatal(err)
	}
	live := mustCreateLog(t, s, "live")
	seq := 0
	appends := func(stop <-chan struct{}, max int) []time.Duration {
		var lat []time.Duration
		for len(lat) < max {
			select {
			case <-stop:
				return lat
			default:
			}
			es := make([]Entry, 100)
			for j := range es {
				p := make([]byte, 256)
				_, _ = rand.Read(p)
				es[j] = Entry{ID: fmt.Sprintf("l-%d", seq), Payload: p}
				seq++
			}
			start := time.Now()
			mustAppend(t, live, es...)
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	report := func(what, metric string, lat []time.Duration) {
		slices.Sort(lat)
		t.Logf("%s: %d appends of 100, p50 %v, p99 %v, max %v", what, len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
		t.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, metric)
	}
	report("alone", "p99-alone-ms", appends(nil, 2000))
	for i, rate := range []float64{0, 50000} {
		stop := make(chan struct{})
		var res PruneResult
		var took time.Duration
		go func() {
			defer close(stop)
			start := time.Now()
			var err error
			res, err = old.PrunePayloads(context.Background(), PruneOptions{Before: uint64(i+1) * n, Rate: rate})
			took = time.Since(start)
			if err != nil {
				t.Error(err)
			}
		}()
		lat := appends(stop, 1<<30)
		<-stop
		report(fmt.Sprintf("beside a prune at rate %v (%d entries in %v, %.0f/s)", rate, res.Pruned, took, float64(res.Pruned)/took.Seconds()),
			[]string{"p99-unbounded-ms", "p99-50k-ms"}[i], lat)
	}
}

package checkers

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

// fakeChecker is a Checker whose pass is a hook.
type fakeChecker struct {
	name string
	run  func(ctx context.Context, p Progress) error
}

func (f *fakeChecker) Name() string                              { return f.name }
func (f *fakeChecker) Run(ctx context.Context, p Progress) error { return f.run(ctx, p) }

var _ Checker = (*fakeChecker)(nil)

// fakeClock is a Clock whose Sleep advances it at once and records how long
// callers asked to wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps int
	slept  time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps++
	c.slept += d
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func (c *fakeClock) stats() (int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleeps, c.slept
}

var quiet = slog.New(slog.DiscardHandler)

// testStore opens a ledger in dir (a fresh one if dir is "") with a fixed key
// per test.
type testStore struct {
	t   *testing.T
	dir string
	key ledgertest.Key
}

func newTestStore(t *testing.T) *testStore {
	return &testStore{t: t, dir: t.TempDir(), key: ledgertest.NewKey(t, "checkers-test")}
}

func (ts *testStore) open() (*ledger.Store, *ledger.Bucket) {
	st := ledgertest.Open(ts.t, ledgertest.WithDir(ts.dir), ledgertest.WithKey(ts.key))
	b, err := st.Bucket("checks")
	if err != nil {
		ts.t.Fatal(err)
	}
	return st, b
}

// memKV is a KV in memory.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (m *memKV) Get(k []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[string(k)]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return v, nil
}

func (m *memKV) Set(k, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[string(k)] = append([]byte(nil), v...)
	return nil
}

// gather returns the value of each series of the runner's metrics, keyed
// by name and label values (name{a,b}).
func gather(t *testing.T, r *Runner) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range r.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					k += ","
				}
				k += l.GetValue()
			}
			k += "}"
			out[k] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

func TestNextStartBounds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s := Schedule{Interval: time.Hour, Jitter: 10 * time.Minute}
	cases := []struct {
		name   string
		last   time.Time
		lo, hi time.Time // the start is in [lo, hi)
	}{
		{"never ran: within the jitter of now", time.Time{}, now, now.Add(10 * time.Minute)},
		{"ran recently: an interval after the last start", now.Add(-20 * time.Minute), now.Add(40 * time.Minute), now.Add(50 * time.Minute)},
		{"overdue: now", now.Add(-5 * time.Hour), now, now.Add(10 * time.Minute)},
		{"exactly due", now.Add(-time.Hour), now, now.Add(10 * time.Minute)},
	}
	for _, c := range cases {
		for _, u := range []float64{0, 0.5, 0.999999999} {
			got := nextStart(s, c.last, now, u)
			if got.Before(c.lo) || !got.Before(c.hi) {
				t.Errorf("%s, u=%v: start %v, want in [%v, %v)", c.name, u, got, c.lo, c.hi)
			}
		}
		if got := nextStart(s, c.last, now, 0); !got.Equal(c.lo) {
			t.Errorf("%s: u=0 gives %v, want the lower bound %v", c.name, got, c.lo)
		}
	}
	// The jitter is used: two draws far apart land far apart.
	if a, b := nextStart(s, time.Time{}, now, 0.1), nextStart(s, time.Time{}, now, 0.9); b.Sub(a) < 7*time.Minute {
		t.Errorf("jitter draws 0.1 and 0.9 are %v apart, want 8m", b.Sub(a))
	}
	// No jitter: exact.
	if got := nextStart(Schedule{Interval: time.Hour}, now.Add(-time.Minute), now, 0.7); !got.Equal(now.Add(59 * time.Minute)) {
		t.Errorf("no jitter: %v", got)
	}
}

// TestRunnerSchedule runs the real loop with a short interval: passes
// start no sooner than an interval after the previous start (timers never
// fire early, so this holds on a loaded machine), keep coming, and each
// draws its jitter.
func TestRunnerSchedule(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var starts []time.Time // the recorded starts of the passes, from OnPass
	c := &fakeChecker{name: "tick", run: func(ctx context.Context, p Progress) error { return p.Checked(ctx, 1) }}
	draws := 0
	r := NewRunner(&memKV{}, Options{Logger: quiet, Rand: func() float64 { draws++; return 0.5 },
		OnPass: func(pr PassResult) {
			mu.Lock()
			starts = append(starts, pr.Run.StartedAt)
			mu.Unlock()
		}})
	const interval, jitter = 40 * time.Millisecond, 20 * time.Millisecond
	if err := r.Register(c, Schedule{Interval: interval, Jitter: jitter}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	deadline := time.After(20 * time.Second)
	for {
		mu.Lock()
		n := len(starts)
		mu.Unlock()
		if n >= 4 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("%d passes in 20s with a 40ms interval", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts); i++ {
		// Each start is scheduled from the previous recorded start, and
		// timers never fire early.
		if gap := starts[i].Sub(starts[i-1]); gap < interval+jitter/2 {
			t.Errorf("pass %d started %v after the previous, want at least interval+jitter*0.5 = %v", i, gap, interval+jitter/2)
		}
	}
	if draws < len(starts) {
		t.Errorf("%d jitter draws for %d passes", draws, len(starts))
	}
}

// TestRunnerUnscheduled: interval 0 runs only on demand.
func TestRunnerUnscheduled(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 10)
	c := &fakeChecker{name: "manual", run: func(ctx context.Context, p Progress) error { ran <- struct{}{}; return nil }}
	// A scheduled checker beside it is the clock of this test: while it
	// completes passes, the Runner's loops are running.
	ticks := make(chan struct{}, 100)
	tick := &fakeChecker{name: "tick"}
	r := NewRunner(&memKV{}, Options{Logger: quiet, OnPass: func(pr PassResult) {
		if pr.Checker == "tick" {
			select {
			case ticks <- struct{}{}:
			default:
			}
		}
	}})
	if err := r.Register(c, Schedule{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(tick, Schedule{Interval: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	for i := 0; i < 3; i++ {
		select {
		case <-ticks:
		case <-time.After(10 * time.Second):
			t.Fatal("the scheduled checker did not run")
		}
	}
	select {
	case <-ran:
		t.Fatal("an unscheduled checker ran without being asked")
	default:
	}
	if err := r.Trigger("manual"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("Trigger did not start a pass")
	}
	if err := r.Trigger("nope"); !errors.Is(err, ErrUnknownChecker) {
		t.Errorf("Trigger(nope) = %v", err)
	}
	cancel()
	<-done
}

// TestThrottle: a pass checking 10,000 entries at 1,000 entries/s must be
// made to wait 10s minus the burst (a tenth of a second's worth), whether
// it reports in small steps, in one large call, or from four goroutines at
// once; unthrottled it never waits; a checker slower than the rate is not
// slowed further.
func TestThrottle(t *testing.T) {
	t.Parallel()
	const n, rate = 10_000, 1000.0
	want := time.Duration((n - rate/10) / rate * float64(time.Second)) // 9.9s
	cases := []struct {
		name    string
		rate    float64
		run     func(ctx context.Context, p Progress, c *fakeClock) error
		lo, hi  time.Duration
		minWait int
	}{
		{"steps of 10", rate, func(ctx context.Context, p Progress, _ *fakeClock) error {
			for i := 0; i < n/10; i++ {
				if err := p.Checked(ctx, 10); err != nil {
					return err
				}
			}
			return nil
		}, want, want + time.Millisecond, n/10 - 10},
		{"one call", rate, func(ctx context.Context, p Progress, _ *fakeClock) error {
			return p.Checked(ctx, n)
		}, want, want + time.Millisecond, 1},
		{"four goroutines", rate, func(ctx context.Context, p Progress, _ *fakeClock) error {
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < n/40; i++ {
						if err := p.Checked(ctx, 10); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			return <-errs
		}, want, time.Hour, n / 40}, // the fake clock adds up waits that overlap in real time
		{"calls without entries cost one each", rate, func(ctx context.Context, p Progress, _ *fakeClock) error {
			for i := 0; i < n; i++ {
				if err := p.Checked(ctx, 0); err != nil {
					return err
				}
			}
			return nil
		}, want, want + time.Millisecond, n - 100},
		{"unthrottled", 0, func(ctx context.Context, p Progress, _ *fakeClock) error {
			return p.Checked(ctx, n)
		}, 0, 0, 0},
		{"checker slower than the rate", rate, func(ctx context.Context, p Progress, c *fakeClock) error {
			for i := 0; i < n/100; i++ {
				c.advance(200 * time.Millisecond) // 100 entries take 200ms: 500/s
				if err := p.Checked(ctx, 100); err != nil {
					return err
				}
			}
			return nil
		}, 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			var c *fakeChecker
			c = &fakeChecker{name: "throttled", run: func(ctx context.Context, p Progress) error { return tc.run(ctx, p, clock) }}
			r := NewRunner(&memKV{}, Options{Logger: quiet, Clock: clock})
			if err := r.Register(c, Schedule{Rate: tc.rate}); err != nil {
				t.Fatal(err)
			}
			run, err := r.RunNow(context.Background(), "throttled")
			if err != nil {
				t.Fatal(err)
			}
			sleeps, slept := clock.stats()
			if slept < tc.lo || slept > tc.hi {
				t.Errorf("waited %v in all, want [%v, %v]", slept, tc.lo, tc.hi)
			}
			if sleeps < tc.minWait {
				t.Errorf("%d blocked calls, want at least %d", sleeps, tc.minWait)
			}
			if tc.lo > 0 && run.EntriesChecked > 0 {
				// The achieved rate over the pass's (virtual) duration.
				if got := float64(run.EntriesChecked) / run.DurationSeconds; got > rate*1.02 {
					t.Errorf("achieved %.0f entries/s, throttle %v", got, rate)
				}
			}
			if want := uint64(n); tc.name == "calls without entries cost one each" {
				if run.EntriesChecked != 0 {
					t.Errorf("entries checked %d, want 0", run.EntriesChecked)
				}
			} else if run.EntriesChecked != want {
				t.Errorf("entries checked %d, want %d", run.EntriesChecked, want)
			}
		})
	}
}

// TestFindingsPersist: the last completed pass's findings, times, entry
// count and error survive a reopen of the store, and the gauges are set
// from them before any new pass.
func TestFindingsPersist(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t)
	st, kv := ts.open()
	clock := newFakeClock()
	findings := []Finding{
		{Log: "orders", Index: At(7), Kind: ledger.IntegrityLeafMismatch, Detail: "payload changed"},
		{Log: "orders", Tile: "0/3", Kind: ledger.IntegrityTileMismatch, Detail: "tile differs"},
		{Log: "pay", Index: At(1), Kind: ledger.IntegrityLeafMismatch, Detail: "x"},
	}
	c := &fakeChecker{name: "scrub", run: func(ctx context.Context, p Progress) error {
		for _, f := range findings {
			p.Found(f)
		}
		clock.advance(3 * time.Second)
		return p.Checked(ctx, 500)
	}}
	r := NewRunner(kv, Options{Logger: quiet, Clock: clock})
	if err := r.Register(c, Schedule{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	run, err := r.RunNow(context.Background(), "scrub")
	if err != nil {
		t.Fatal(err)
	}
	if run.Result != ResultFindings || run.FindingsCount != 3 || run.EntriesChecked != 500 || run.DurationSeconds != 3 {
		t.Fatalf("run %+v", run)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	_, kv2 := ts.open()
	r2 := NewRunner(kv2, Options{Logger: quiet})
	if err := r2.Register(&fakeChecker{name: "scrub"}, Schedule{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	sts := r2.Status()
	if len(sts) != 1 {
		t.Fatalf("%d statuses", len(sts))
	}
	s := sts[0]
	if len(s.Findings) != 3 || *s.Findings[0].Index != 7 || s.Findings[1].Tile != "0/3" || s.Findings[2].Log != "pay" {
		t.Errorf("findings after reopen: %+v", s.Findings)
	}
	if s.LastRun == nil || !s.LastRun.StartedAt.Equal(run.StartedAt) || !s.LastRun.EndedAt.Equal(run.EndedAt) ||
		s.LastRun.EntriesChecked != 500 || s.LastRun.Result != ResultFindings {
		t.Errorf("last run after reopen: %+v, want %+v", s.LastRun, run)
	}
	if !s.LastSuccessAt.Equal(run.StartedAt) || s.FindingsByKind[ledger.IntegrityLeafMismatch] != 2 || s.State != "idle" {
		t.Errorf("status after reopen: %+v", s)
	}
	m := gather(t, r2)
	if m["checks_findings{scrub,leaf_mismatch}"] != 2 || m["checks_findings{scrub,tile_mismatch}"] != 1 || m["checks_findings{scrub,rollback}"] != 0 {
		t.Errorf("findings gauge after reopen: %v", m)
	}
	if m["checks_last_success_timestamp_seconds{scrub}"] != float64(run.StartedAt.Unix()) || m["checks_run_duration_seconds{scrub}"] != 3 {
		t.Errorf("last success / duration after reopen: %v / %v", m["checks_last_success_timestamp_seconds{scrub}"], m["checks_run_duration_seconds{scrub}"])
	}
}

// TestMetrics follows the metrics over a pass with findings, a clean pass
// and a failed one.
func TestMetrics(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var mode string
	c := &fakeChecker{name: "audit", run: func(ctx context.Context, p Progress) error {
		clock.advance(2 * time.Second)
		if err := p.Checked(ctx, 1500); err != nil {
			return err
		}
		switch mode {
		case "findings":
			p.Found(Finding{Log: "a", Kind: ledger.IntegrityEntryMissing, Index: At(1)})
			p.Found(Finding{Log: "a", Kind: ledger.IntegrityEntryMissing, Index: At(2)})
			p.Found(Finding{Log: "b", Kind: "novel_kind"})
		case "error":
			return errors.New("disk on fire")
		}
		return nil
	}}
	r := NewRunner(&memKV{}, Options{Logger: quiet, Clock: clock})
	if err := r.Register(c, Schedule{Interval: 6 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	m := gather(t, r)
	if v, ok := m["checks_findings{audit,entry_missing}"]; !ok || v != 0 {
		t.Errorf("findings gauge before any pass: %v %v (want a 0 series)", v, ok)
	}
	if _, ok := m["checks_last_success_timestamp_seconds{audit}"]; ok {
		t.Error("last success exported before any success")
	}
	if m["checks_interval_seconds{audit}"] != 6*3600 {
		t.Errorf("interval %v", m["checks_interval_seconds{audit}"])
	}

	mode = "findings"
	first, _ := r.RunNow(context.Background(), "audit")
	m = gather(t, r)
	for k, want := range map[string]float64{
		"checks_runs_total{audit,findings}":            1,
		"checks_runs_total{audit,ok}":                  0,
		"checks_entries_checked_total{audit}":          1500,
		"checks_findings{audit,entry_missing}":         2,
		"checks_findings{audit,novel_kind}":            1,
		"checks_findings_total{audit,entry_missing}":   2,
		"checks_run_duration_seconds{audit}":           2,
		"checks_last_run_failed{audit}":                0,
		"checks_last_success_timestamp_seconds{audit}": float64(first.StartedAt.Unix()),
	} {
		if m[k] != want {
			t.Errorf("after a pass with findings: %s = %v, want %v", k, m[k], want)
		}
	}

	mode = "clean"
	clock.advance(time.Hour)
	second, _ := r.RunNow(context.Background(), "audit")
	m = gather(t, r)
	for k, want := range map[string]float64{
		"checks_runs_total{audit,ok}":                  1,
		"checks_entries_checked_total{audit}":          3000,
		"checks_findings{audit,entry_missing}":         0,
		"checks_findings{audit,novel_kind}":            0, // a kind seen once drops back to 0
		"checks_findings_total{audit,entry_missing}":   2,
		"checks_last_success_timestamp_seconds{audit}": float64(second.StartedAt.Unix()),
	} {
		if m[k] != want {
			t.Errorf("after a clean pass: %s = %v, want %v", k, m[k], want)
		}
	}

	mode = "error"
	clock.advance(time.Hour)
	if _, err := r.RunNow(context.Background(), "audit"); err == nil {
		t.Fatal("a failing pass returned no error")
	}
	m = gather(t, r)
	for k, want := range map[string]float64{
		"checks_runs_total{audit,error}":               1,
		"checks_last_run_failed{audit}":                1,
		"checks_entries_checked_total{audit}":          4500,
		"checks_last_success_timestamp_seconds{audit}": float64(second.StartedAt.Unix()),
	} {
		if m[k] != want {
			t.Errorf("after a failed pass: %s = %v, want %v", k, m[k], want)
		}
	}
}

// TestOnPass: every pass is reported with its findings, exact counts by
// log and kind, and whether it completed; MaxFindings bounds the list but
// not the counts.
func TestOnPass(t *testing.T) {
	t.Parallel()
	var got []PassResult
	many := 0
	fail := false
	c := &fakeChecker{name: "scrub", run: func(ctx context.Context, p Progress) error {
		for i := 0; i < many; i++ {
			p.Found(Finding{Log: "l", Index: At(uint64(i)), Kind: ledger.IntegrityLeafMismatch})
		}
		if fail {
			return errors.New("read error")
		}
		return nil
	}}
	r := NewRunner(&memKV{}, Options{Logger: quiet, OnPass: func(pr PassResult) { got = append(got, pr) }})
	if err := r.Register(c, Schedule{}); err != nil {
		t.Fatal(err)
	}
	many = MaxFindings + 5
	r.RunNow(context.Background(), "scrub")
	many = 0
	r.RunNow(context.Background(), "scrub")
	many, fail = 1, true
	r.RunNow(context.Background(), "scrub")
	if len(got) != 3 {
		t.Fatalf("%d OnPass calls, want 3", len(got))
	}
	if !got[0].Complete || len(got[0].Findings) != MaxFindings || got[0].Counts[LogKind{"l", ledger.IntegrityLeafMismatch}] != MaxFindings+5 {
		t.Errorf("pass 1: complete %v, %d findings, counts %v", got[0].Complete, len(got[0].Findings), got[0].Counts)
	}
	if !got[1].Complete || len(got[1].Findings) != 0 || len(got[1].Counts) != 0 {
		t.Errorf("clean pass: %+v", got[1])
	}
	if got[2].Complete || len(got[2].Findings) != 1 || got[2].Run.Result != ResultError {
		t.Errorf("failed pass: %+v", got[2])
	}
	if s := r.Status()[0]; s.LastRun.FindingsCount != 1 || len(s.Findings) != 0 || len(s.LastRunFindings) != 1 {
		t.Errorf("status after a failed pass with a partial finding: %+v", s)
	}
}

// TestCheckerError: a checker that fails or panics leaves an error state,
// keeps the last completed pass's findings, and takes nothing down; its
// error is not a finding.
func TestCheckerError(t *testing.T) {
	t.Parallel()
	ts := newTestStore(t)
	_, kv := ts.open()
	var mode string
	c := &fakeChecker{name: "scrub", run: func(ctx context.Context, p Progress) error {
		switch mode {
		case "find":
			p.Found(Finding{Log: "orders", Index: At(3), Kind: ledger.IntegrityEntryCorrupt})
		case "fail":
			p.Checked(ctx, 10)
			return errors.New("pebble: read failed")
		case "panic":
			var m map[string]int
			m["x"]++ // a nil map write: panics
		}
		return nil
	}}
	r := NewRunner(kv, Options{Logger: quiet})
	if err := r.Register(c, Schedule{Interval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	mode = "find"
	r.RunNow(context.Background(), "scrub")
	for _, m := range []string{"fail", "panic"} {
		mode = m
		run, err := r.RunNow(context.Background(), "scrub")
		if err == nil || run.Result != ResultError {
			t.Fatalf("%s: result %q, err %v", m, run.Result, err)
		}
		s := r.Status()[0]
		if s.LastError == "" || s.LastRun.Result != ResultError || s.State != "idle" {
			t.Errorf("%s: status %+v", m, s)
		}
		if len(s.Findings) != 1 || s.Findings[0].Kind != ledger.IntegrityEntryCorrupt || len(s.LastRunFindings) != 0 {
			t.Errorf("%s: findings %+v / last run %+v, want the completed pass's one finding and no new one", m, s.Findings, s.LastRunFindings)
		}
		if g := gather(t, r); g["checks_findings{scrub,entry_corrupt}"] != 1 {
			t.Errorf("%s: findings gauge %v", m, g["checks_findings{scrub,entry_corrupt}"])
		}
	}
	if s := r.Status()[0]; s.LastRun.EntriesChecked != 0 || !strings.Contains(s.LastError, "panicked") {
		t.Errorf("panic: %+v", s.LastRun)
	}
}

// TestStopDuringPass: cancelling Run's context stops a throttled pass in
// progress promptly; the stopped pass is counted as canceled but not
// recorded, so the last record stays the last real pass.
func TestStopDuringPass(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	c := &fakeChecker{name: "slow", run: func(ctx context.Context, p Progress) error {
		close(started)
		for {
			if err := p.Checked(ctx, 1000); err != nil { // 1000 entries at 10/s: 100s a call
				return err
			}
		}
	}}
	kv := &memKV{}
	r := NewRunner(kv, Options{Logger: quiet})
	if err := r.Register(c, Schedule{Interval: time.Hour, Rate: 10}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first pass did not start")
	}
	if s := r.Status()[0]; s.State != "running" || s.Current == nil {
		t.Errorf("status during the pass: %+v", s)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel with a pass throttled for 100s")
	}
	s := r.Status()[0]
	if s.State != "idle" || s.LastRun != nil {
		t.Errorf("after stop: %+v", s)
	}
	if _, err := kv.Get(stateKey("slow")); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("a stopped pass was recorded: %v", err)
	}
	if g := gather(t, r); g["checks_runs_total{slow,canceled}"] != 1 {
		t.Errorf("canceled runs %v", g["checks_runs_total{slow,canceled}"])
	}
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	r := NewRunner(&memKV{}, Options{Logger: quiet})
	if err := r.Register(&fakeChecker{name: "a"}, Schedule{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(&fakeChecker{name: "a"}, Schedule{}); err == nil {
		t.Error("a second checker named a was accepted")
	}
	if err := r.Register(&fakeChecker{name: ""}, Schedule{}); err == nil {
		t.Error("a nameless checker was accepted")
	}
	if err := r.Register(&fakeChecker{name: "b"}, Schedule{Rate: -1}); err == nil {
		t.Error("a negative rate was accepted")
	}
	if _, err := r.RunNow(context.Background(), "zz"); !errors.Is(err, ErrUnknownChecker) {
		t.Errorf("RunNow(zz) = %v", err)
	}
	// A record that does not decode starts afresh instead of failing.
	kv := &memKV{}
	kv.Set(stateKey("c"), []byte("{not json"))
	r2 := NewRunner(kv, Options{Logger: quiet})
	if err := r2.Register(&fakeChecker{name: "c"}, Schedule{}); err != nil {
		t.Errorf("unreadable record: %v", err)
	}
}

// kindedChecker is a fakeChecker that declares its finding kinds.
type kindedChecker struct {
	*fakeChecker
	kinds []string
}

func (k kindedChecker) FindingKinds() []string { return k.kinds }

// TestMetricsDeclaredKinds: a checker that declares its kinds has a 0
// series for each from registration, and none for the ledger's kinds; one
// that does not gets the ledger's kinds.
func TestMetricsDeclaredKinds(t *testing.T) {
	t.Parallel()
	r := NewRunner(&memKV{}, Options{Logger: quiet, Clock: newFakeClock()})
	peers := kindedChecker{&fakeChecker{name: "peers", run: func(context.Context, Progress) error { return nil }},
		[]string{ledger.IntegrityFork, IntegrityPeerRollback}}
	plain := &fakeChecker{name: "plain", run: func(context.Context, Progress) error { return nil }}
	for _, c := range []Checker{peers, plain} {
		if err := r.Register(c, Schedule{}); err != nil {
			t.Fatal(err)
		}
	}
	m := gather(t, r)
	for _, s := range []string{"checks_findings{peers,fork}", "checks_findings{peers,peer_rollback}",
		"checks_findings_total{peers,fork}", "checks_findings{plain,leaf_mismatch}"} {
		if v, ok := m[s]; !ok || v != 0 {
			t.Errorf("%s = %v, %v; want a 0 series", s, v, ok)
		}
	}
	if _, ok := m["checks_findings{peers,leaf_mismatch}"]; ok {
		t.Error("a checker that declares its kinds has a series for a kind it never reports")
	}
}

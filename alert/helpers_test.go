package alert_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

var quiet = slog.New(slog.DiscardHandler)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a Manager over a real ledger bucket that can be reopened.
type env struct {
	t     testing.TB
	dir   string
	clock *clock
	opts  alert.Options
	store *ledger.Store
	m     *alert.Manager
}

// newEnv opens a Manager in a fresh directory; opts.Now and opts.Logger
// default to the env's clock and a quiet logger.
func newEnv(t testing.TB, opts alert.Options) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: newClock(), opts: opts}
	if e.opts.Now == nil {
		e.opts.Now = e.clock.Now
	}
	if e.opts.Logger == nil {
		e.opts.Logger = quiet
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	e.store = ledgertest.Open(e.t, ledgertest.WithDir(e.dir), ledgertest.WithKeyName("alert-test.example"))
	b, err := e.store.Bucket("alerts")
	if err != nil {
		e.t.Fatal(err)
	}
	if e.m, err = alert.NewManager(b, e.opts); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) close() {
	if e.m != nil {
		if err := e.m.Close(); err != nil {
			e.t.Errorf("close manager: %v", err)
		}
		e.m = nil
	}
	if e.store != nil {
		if err := e.store.Close(); err != nil {
			e.t.Errorf("close store: %v", err)
		}
		e.store = nil
	}
}

func (e *env) reopen() {
	e.t.Helper()
	e.close()
	e.open()
}

func (e *env) fire(a alert.Alert) alert.Alert {
	e.t.Helper()
	got, err := e.m.Fire(a)
	if err != nil {
		e.t.Fatalf("Fire(%s): %v", a.ID, err)
	}
	return got
}

func (e *env) get(id string) alert.Alert {
	e.t.Helper()
	a, ok := e.m.Get(id)
	if !ok {
		e.t.Fatalf("Get(%q): not found", id)
	}
	return a
}

func drift(subject, summary string) alert.Alert {
	return alert.Alert{ID: "drift/" + subject, Kind: alert.KindDrift, Subject: subject, Summary: summary}
}

// recordingSink records what it is told; fail, if set, decides the
// result of each call.
type recordingSink struct {
	name string
	mu   sync.Mutex
	got  []alert.Alert
	fail func(alert.Alert) error
	ch   chan alert.Alert // each delivered alert, if not nil
}

func newRecordingSink(name string) *recordingSink {
	return &recordingSink{name: name, ch: make(chan alert.Alert, 100)}
}

func (s *recordingSink) Name() string { return s.name }

func (s *recordingSink) Notify(ctx context.Context, as []alert.Alert) error {
	if len(as) != 1 {
		return errors.New("recordingSink: want one alert per call")
	}
	if s.fail != nil {
		if err := s.fail(as[0]); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.got = append(s.got, as[0])
	s.mu.Unlock()
	s.ch <- as[0]
	return nil
}

// next waits for the next delivered alert.
func (s *recordingSink) next(t testing.TB) alert.Alert {
	t.Helper()
	select {
	case a := <-s.ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("sink: no notification within 10s")
		return alert.Alert{}
	}
}

// none requires that m handed the sink nothing more: everything m queued
// before the call has been handled once Flush returns.
func (s *recordingSink) none(t testing.TB, m *alert.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	select {
	case a := <-s.ch:
		t.Fatalf("sink: unexpected notification %s %s %q", a.ID, a.State, a.Summary)
	default:
	}
}

// memKV is an in-memory KV with failure hooks.
type memKV struct {
	mu      sync.Mutex
	m       map[string][]byte
	failSet error
}

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

var _ alert.KV = (*memKV)(nil)

func (kv *memKV) Get(k []byte) ([]byte, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[string(k)]
	if !ok {
		return nil, ledger.ErrNotFound
	}
	return slices.Clone(v), nil
}

func (kv *memKV) Set(k, v []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.failSet != nil {
		return kv.failSet
	}
	kv.m[string(k)] = slices.Clone(v)
	return nil
}

func (kv *memKV) Delete(k []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	delete(kv.m, string(k))
	return nil
}

func (kv *memKV) Scan(prefix []byte, fn func(k, v []byte) error) error {
	kv.mu.Lock()
	var keys []string
	for k := range kv.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	kv.mu.Unlock()
	for _, k := range keys {
		kv.mu.Lock()
		v, ok := kv.m[k]
		kv.mu.Unlock()
		if ok {
			if err := fn([]byte(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

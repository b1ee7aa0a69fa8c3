package alert

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/ledger"
)

// KV is the durable keyspace the Manager keeps its alerts in, such as a
// [ledger.Bucket]. Set and Delete must be durable when they return. Get
// returns an error wrapping [ledger.ErrNotFound] for a missing key. Scan
// calls fn for each key with the prefix in key order; fn must not keep k
// or v, and an error from fn stops the scan and is returned.
type KV interface {
	Get(key []byte) ([]byte, error)
	Set(key, value []byte) error
	Delete(key []byte) error
	Scan(prefix []byte, fn func(k, v []byte) error) error
}

var _ KV = (*ledger.Bucket)(nil)

// Keys in the KV: one JSON alert per id, and the high-water mark of Seq
// (written before pruning, so that Seq never goes back after a restart).
var (
	alertPrefix = []byte("alert/")
	seqKey      = []byte("seq")
)

// Errors of the Manager.
var (
	ErrNotFound = errors.New("alert: not found")
	ErrClosed   = errors.New("alert: manager closed")
)

// Options configure a Manager. The zero value is usable.
type Options struct {
	// Sinks are notified of alert changes, asynchronously (see Manager).
	Sinks  []Sink
	Logger *slog.Logger
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
	// ResolvedRetention is how long a resolved alert is kept (default 7
	// days). Older ones are pruned when the Manager opens and hourly.
	ResolvedRetention time.Duration
	// QueueSize bounds the notifications waiting for each sink (default
	// 1024); when a sink's queue is full, new notifications for it are
	// dropped and counted.
	QueueSize int
	// DrainTimeout bounds how long Close waits for sinks to deliver what
	// is queued (default 5s).
	DrainTimeout time.Duration
	// SubscriberBuffer is the number of changes a subscriber may fall
	// behind before it is dropped (default 256).
	SubscriberBuffer int
}

const pruneInterval = time.Hour

// Manager keeps the alerts. It is safe for concurrent use.
//
// Every change is written to the KV before anyone is told about it. Sinks
// are told through a bounded queue per sink, served by one goroutine per
// sink, so a slow or failing sink never blocks Fire, Resolve or Sync and
// each sink sees the changes of an alert in order. The Manager passes one
// alert per Notify call.
type Manager struct {
	kv    KV
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	sinks []*sinkQueue // m.mu guards it once NewManager returns (SetSinks)
	// retired are queues SetSinks replaced, still delivering what was
	// queued before; Close waits for them as for the current ones.
	retired []*sinkQueue

	ctx    context.Context // cancelled when Close gives up draining
	cancel context.CancelFunc
	stop   chan struct{} // closed by Close: stops the pruner
	wg     sync.WaitGroup

	firing        *prometheus.GaugeVec
	notifications *prometheus.CounterVec

	mu     sync.Mutex
	alerts map[string]*Alert
	seq    uint64
	subs   map[*subscriber]struct{}
	closed bool
}

// NewManager loads the alerts kept in kv, prunes resolved alerts older than
// the retention, and starts the sinks' delivery. Close stops it.
func NewManager(kv KV, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ResolvedRetention <= 0 {
		opts.ResolvedRetention = 7 * 24 * time.Hour
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 1024
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	if opts.SubscriberBuffer <= 0 {
		opts.SubscriberBuffer = 256
	}
	m := &Manager{
		kv: kv, opts: opts, log: opts.Logger, now: opts.Now,
		stop:   make(chan struct{}),
		alerts: make(map[string]*Alert),
		subs:   make(map[*subscriber]struct{}),
		firing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "alerts_firing", Help: "Alerts firing, by kind.",
		}, []string{"kind"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alert_notifications_total",
			Help: "Alert notifications to sinks by result: delivered, failed (after retries, or refused), dropped (queue full or shut down).",
		}, []string{"sink", "result"}),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, k := range Kinds {
		m.firing.WithLabelValues(string(k))
	}
	if err := m.load(); err != nil {
		m.cancel()
		return nil, err
	}
	if err := m.prune(); err != nil {
		m.cancel()
		return nil, err
	}
	if err := checkSinkNames(opts.Sinks); err != nil {
		m.cancel()
		return nil, err
	}
	m.sinks = m.startSinks(opts.Sinks)
	m.wg.Add(1)
	go m.pruneLoop()
	return m, nil
}

func (m *Manager) load() error {
	err := m.kv.Scan(alertPrefix, func(k, v []byte) error {
		a := new(Alert)
		if err := json.Unmarshal(v, a); err != nil {
			return fmt.Errorf("alert: load %q: %w", k, err)
		}
		if a.Labels["severity"] == "" { // stored before alerts had one
			if a.Labels == nil {
				a.Labels = map[string]string{}
			}
			a.Labels["severity"] = a.Kind.Severity()
		}
		m.alerts[a.ID] = a
		m.seq = max(m.seq, a.Seq)
		if a.State == StateFiring {
			m.firing.WithLabelValues(string(a.Kind)).Inc()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alert: load: %w", err)
	}
	v, err := m.kv.Get(seqKey)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		return fmt.Errorf("alert: load seq: %w", err)
	default:
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("alert: load seq %q: %w", v, err)
		}
		m.seq = max(m.seq, n)
	}
	return nil
}

// prune deletes resolved alerts that ended before the retention.
func (m *Manager) prune() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-m.opts.ResolvedRetention)
	var old []string
	for id, a := range m.alerts {
		if a.State == StateResolved && a.EndsAt != nil && a.EndsAt.Before(cutoff) {
			old = append(old, id)
		}
	}
	if len(old) == 0 {
		return nil
	}
	if err := m.kv.Set(seqKey, strconv.AppendUint(nil, m.seq, 10)); err != nil {
		return fmt.Errorf("alert: prune: %w", err)
	}
	for _, id := range old {
		if err := m.kv.Delete(key(id)); err != nil {
			return fmt.Errorf("alert: prune %s: %w", id, err)
		}
		delete(m.alerts, id)
	}
	m.log.Debug("pruned resolved alerts", "count", len(old))
	return nil
}

func (m *Manager) pruneLoop() {
	defer m.wg.Done()
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if err := m.prune(); err != nil {
				m.log.Error("pruning resolved alerts failed", "err", err)
			}
		}
	}
}

func key(id string) []byte { return append(slices.Clip(alertPrefix), id...) }

// Fire raises a, keyed by a.ID; the Manager sets its State, times and Seq
// and returns the alert as stored.
//
//   - A new ID, or one whose alert has resolved, starts firing now: sinks
//     and subscribers are told.
//   - An ID already firing takes a's Summary, Labels and Details. If they
//     differ from the stored ones, Seq is bumped and subscribers are told;
//     sinks are told again only if Summary or Labels changed (a change of
//     Details alone is not worth a page). If nothing differs, Fire changes
//     nothing and tells no one, so raisers may repeat themselves freely.
//     Because sinks identify an alert by its labels, a change of Labels
//     first sends them the old alert as resolved.
//
// A firing alert's Kind and Subject cannot change; Fire returns an error
// wrapping ErrInvalid if a's differ.
func (m *Manager) Fire(a Alert) (Alert, error) {
	if err := normalize(&a); err != nil {
		return Alert{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fire(a)
}

// normalize checks the raiser's fields of a and puts them in canonical
// form: an owned copy, Details compacted, the kind's severity when the
// raiser gave none.
func normalize(a *Alert) error {
	if err := a.check(); err != nil {
		return err
	}
	*a = a.clone()
	if a.Labels["severity"] == "" {
		if a.Labels == nil {
			a.Labels = map[string]string{}
		}
		a.Labels["severity"] = a.Kind.Severity()
	}
	if len(a.Details) == 0 {
		a.Details = nil
	} else {
		var b bytes.Buffer
		if err := json.Compact(&b, a.Details); err != nil {
			return fmt.Errorf("%w %q: details: %v", ErrInvalid, a.ID, err)
		}
		a.Details = b.Bytes()
	}
	return nil
}

// fire is Fire with m.mu held and a normalized.
func (m *Manager) fire(a Alert) (Alert, error) {
	if m.closed {
		return Alert{}, ErrClosed
	}
	now := m.now().UTC()
	old := m.alerts[a.ID]
	next := Alert{
		ID: a.ID, Kind: a.Kind, State: StateFiring, Subject: a.Subject,
		Summary: a.Summary, Labels: a.Labels, Details: a.Details,
		StartsAt: now, UpdatedAt: now, Seq: m.seq + 1,
	}
	toSinks := true
	var resolvedOld *Alert // the old labels' alert, for sinks
	if old != nil && old.State == StateFiring {
		if old.Kind != a.Kind || old.Subject != a.Subject {
			return Alert{}, fmt.Errorf("%w %q: firing as %s/%s, cannot become %s/%s",
				ErrInvalid, a.ID, old.Kind, old.Subject, a.Kind, a.Subject)
		}
		if sameContent(old, &a) {
			return old.clone(), nil
		}
		next.StartsAt = old.StartsAt
		toSinks = old.Summary != a.Summary || !maps.Equal(old.Labels, a.Labels)
		if !maps.Equal(old.Labels, a.Labels) {
			r := old.clone()
			r.State, r.EndsAt, r.UpdatedAt = StateResolved, &now, now
			resolvedOld = &r
		}
	}
	if err := m.store(&next); err != nil {
		return Alert{}, err
	}
	if old == nil || old.State != StateFiring {
		m.firing.WithLabelValues(string(next.Kind)).Inc()
	}
	if resolvedOld != nil {
		m.toSinks(*resolvedOld)
	}
	m.publish(&next, toSinks)
	return next.clone(), nil
}

// store writes a durably and makes it the current version of its ID.
func (m *Manager) store(a *Alert) error {
	// Without HTML escaping, the stored Details are the bytes Fire kept
	// (json.Marshal would turn "&" into "\u0026"), so a reloaded alert
	// fired again with the same content is seen as unchanged.
	var v bytes.Buffer
	enc := json.NewEncoder(&v)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a); err != nil {
		return fmt.Errorf("alert: encode %s: %w", a.ID, err)
	}
	if err := m.kv.Set(key(a.ID), bytes.TrimSuffix(v.Bytes(), []byte{'\n'})); err != nil {
		return fmt.Errorf("alert: store %s: %w", a.ID, err)
	}
	m.alerts[a.ID] = a
	m.seq = a.Seq
	return nil
}

// Resolve resolves the firing alert id: it ends now, and sinks and
// subscribers are told. Resolving a resolved alert does nothing; an
// unknown id is ErrNotFound.
func (m *Manager) Resolve(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	old := m.alerts[id]
	if old == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if old.State != StateFiring {
		return nil
	}
	return m.resolve(old)
}

func (m *Manager) resolve(old *Alert) error {
	now := m.now().UTC()
	next := old.clone()
	next.State, next.EndsAt, next.UpdatedAt, next.Seq = StateResolved, &now, now, m.seq+1
	if err := m.store(&next); err != nil {
		return err
	}
	m.firing.WithLabelValues(string(next.Kind)).Dec()
	m.publish(&next, true)
	return nil
}

// Sync makes firing the complete set of firing alerts of the kind and
// subject: it fires each (as Fire does) and resolves every other firing
// alert with that kind and subject. This is how a raiser that re-checks a
// condition reports it gone: an empty firing resolves them all. Alerts in
// firing with an empty Kind or Subject take the given ones; others must
// match. Nothing is changed if any alert is invalid.
func (m *Manager) Sync(kind Kind, subject string, firing []Alert) error {
	if !kind.Valid() {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, kind)
	}
	if subject == "" {
		return fmt.Errorf("%w: empty subject", ErrInvalid)
	}
	keep := make(map[string]bool, len(firing))
	norm := make([]Alert, len(firing))
	for i, a := range firing {
		if a.Kind == "" {
			a.Kind = kind
		}
		if a.Subject == "" {
			a.Subject = subject
		}
		if a.Kind != kind || a.Subject != subject {
			return fmt.Errorf("%w %q: %s/%s given to Sync(%s, %s)", ErrInvalid, a.ID, a.Kind, a.Subject, kind, subject)
		}
		if err := normalize(&a); err != nil {
			return err
		}
		norm[i], keep[a.ID] = a, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	var errs []error
	for _, a := range norm {
		if _, err := m.fire(a); err != nil {
			errs = append(errs, err)
		}
	}
	for _, old := range m.sorted() {
		if old.State == StateFiring && old.Kind == kind && old.Subject == subject && !keep[old.ID] {
			if err := m.resolve(old); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sorted returns the alerts by Seq, oldest first; m.mu must be held.
func (m *Manager) sorted() []*Alert {
	all := slices.Collect(maps.Values(m.alerts))
	slices.SortFunc(all, func(a, b *Alert) int { return cmp.Compare(a.Seq, b.Seq) })
	return all
}

// Get returns the alert id.
func (m *Manager) Get(id string) (Alert, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.alerts[id]
	if !ok {
		return Alert{}, false
	}
	return a.clone(), true
}

// Filter selects alerts for List. Zero fields select everything.
type Filter struct {
	State   State
	Kind    Kind
	Subject string
	Limit   int // at most this many; 0 is no limit
}

// List returns the alerts the filter selects, the most recently changed
// first (by Seq).
func (m *Manager) List(f Filter) []Alert {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := m.sorted()
	out := []Alert{}
	for i := len(all) - 1; i >= 0 && (f.Limit <= 0 || len(out) < f.Limit); i-- {
		a := all[i]
		if (f.State == "" || a.State == f.State) && (f.Kind == "" || a.Kind == f.Kind) &&
			(f.Subject == "" || a.Subject == f.Subject) {
			out = append(out, a.clone())
		}
	}
	return out
}

// Close stops the Manager: Fire, Resolve and Sync fail with ErrClosed from
// then on, subscribers' channels close, and the sinks get up to
// Options.DrainTimeout to deliver what is queued; what is left after that
// is dropped. Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for s := range m.subs {
		delete(m.subs, s)
		close(s.ch)
	}
	for _, sq := range m.sinks {
		close(sq.q)
	}
	queues := append(m.retired, m.sinks...)
	m.mu.Unlock()
	close(m.stop)
	deadline := time.NewTimer(m.opts.DrainTimeout)
	defer deadline.Stop()
	for _, sq := range queues {
		select {
		case <-sq.done:
		case <-deadline.C:
			m.log.Warn("alert sinks did not drain in time; dropping the rest", "timeout", m.opts.DrainTimeout)
			m.cancel()
			<-sq.done
		}
	}
	m.cancel()
	m.wg.Wait()
	return nil
}

func checkSinkNames(sinks []Sink) error {
	seen := make(map[string]bool)
	for _, s := range sinks {
		if seen[s.Name()] {
			return fmt.Errorf("alert: two sinks named %q", s.Name())
		}
		seen[s.Name()] = true
	}
	return nil
}

// startSinks starts a queue and its delivery for each sink.
func (m *Manager) startSinks(sinks []Sink) []*sinkQueue {
	var out []*sinkQueue
	for _, s := range sinks {
		name := s.Name()
		sq := &sinkQueue{sink: s, name: name, q: make(chan notice, m.opts.QueueSize), done: make(chan struct{})}
		for _, r := range []string{"delivered", "failed", "dropped"} {
			m.notifications.WithLabelValues(name, r)
		}
		out = append(out, sq)
		go m.deliver(sq)
	}
	return out
}

// SetSinks replaces the sinks (a configuration reload of the webhooks).
// The alerts, their state and the subscribers are kept. Every change made
// after SetSinks returns goes to the new sinks only; what was queued for
// the old ones before it is still delivered to them (Close waits for it as
// for the rest). Sink names must be unique, as for NewManager; on an error
// nothing changes. The notification counters of a sink no longer present
// are removed. It returns ErrClosed after Close.
func (m *Manager) SetSinks(sinks []Sink) error {
	if err := checkSinkNames(sinks); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	old := m.sinks
	m.sinks = m.startSinks(sinks)
	kept := map[string]bool{}
	for _, s := range sinks {
		kept[s.Name()] = true
	}
	for _, sq := range old {
		close(sq.q)
		if !kept[sq.name] {
			m.notifications.DeletePartialMatch(prometheus.Labels{"sink": sq.name})
		}
	}
	// Forget retired queues that have drained, so that reloads do not
	// pile them up.
	live := m.retired[:0]
	for _, sq := range m.retired {
		select {
		case <-sq.done:
		default:
			live = append(live, sq)
		}
	}
	m.retired = append(live, old...)
	return nil
}

// Collectors returns the Manager's Prometheus collectors: alerts_firing
// (gauge by kind) and alert_notifications_total (counter by sink and
// result). Names carry no prefix; the daemon registers them under auditd_.
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.firing, m.notifications}
}

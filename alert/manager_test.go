package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/auditd/auditd/alert"
)

func TestPersistAcrossReopen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{})
	a := drift("balances", "3 keys differ")
	a.Labels = map[string]string{"severity": "critical"}
	a.Details = json.RawMessage(`{"keys": ["k1", "k2"],  "checkpoint": {"size": 12}}`)
	e.fire(a)
	e.clock.Add(time.Minute)
	e.fire(alert.Alert{ID: "integrity/payments.0/offset_conflict", Kind: alert.KindIntegrity, Subject: "payments.0", Summary: "offset 7 seen twice"})
	e.clock.Add(time.Minute)
	if err := e.m.Resolve("integrity/payments.0/offset_conflict"); err != nil {
		t.Fatal(err)
	}
	before := e.m.List(alert.Filter{})

	e.reopen()
	after := e.m.List(alert.Filter{})
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after reopen:\n%+v\nbefore:\n%+v", after, before)
	}
	got := e.get("drift/balances")
	if string(got.Details) != `{"keys":["k1","k2"],"checkpoint":{"size":12}}` {
		t.Errorf("details %s, want them compacted", got.Details)
	}
	if got.Labels["severity"] != "critical" || got.State != alert.StateFiring || got.Seq != 1 {
		t.Errorf("reloaded %+v", got)
	}
	r := e.get("integrity/payments.0/offset_conflict")
	if r.State != alert.StateResolved || r.EndsAt == nil || !r.EndsAt.Equal(newClock().Now().Add(2*time.Minute)) || r.Seq != 3 {
		t.Errorf("reloaded resolved alert %+v", r)
	}
	// Seq goes on from where it was.
	if n := e.fire(drift("orders", "x")); n.Seq != 4 {
		t.Errorf("first Seq after reopen = %d, want 4", n.Seq)
	}
	if v := firing(t, e.m, alert.KindDrift); v != 2 {
		t.Errorf("alerts_firing{kind=drift} = %v after reopen, want 2", v)
	}
}

// firing returns alerts_firing{kind}.
func firing(t testing.TB, m *alert.Manager, kind alert.Kind) float64 {
	t.Helper()
	return metricValue(t, m, "alerts_firing", map[string]string{"kind": string(kind)})
}

// notifications returns alert_notifications_total{sink, result}.
func notifications(t testing.TB, m *alert.Manager, sink, result string) float64 {
	t.Helper()
	return metricValue(t, m, "alert_notifications_total", map[string]string{"sink": sink, "result": result})
}

// metricValue gathers m's collectors and returns the value of the series
// with the name and labels, failing if there is none.
func metricValue(t testing.TB, m *alert.Manager, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range s.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return value(s)
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	}
	return 0
}

func TestFire(t *testing.T) {
	t.Parallel()
	sink := newRecordingSink("rec")
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{sink}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, _ := e.m.Subscribe(ctx)
	t0 := e.clock.Now()

	// A new alert fires now.
	a := e.fire(drift("balances", "3 keys differ"))
	if a.State != alert.StateFiring || !a.StartsAt.Equal(t0) || !a.UpdatedAt.Equal(t0) || a.EndsAt != nil || a.Seq != 1 {
		t.Fatalf("new alert: %+v", a)
	}
	if n := sink.next(t); n.ID != a.ID || n.Seq != 1 {
		t.Errorf("sink got %+v", n)
	}
	if ev := <-events; ev.Seq != 1 {
		t.Errorf("subscriber got %+v", ev)
	}

	// The same again changes nothing and tells no one.
	e.clock.Add(time.Minute)
	if again := e.fire(drift("balances", "3 keys differ")); !reflect.DeepEqual(again, a) {
		t.Errorf("unchanged re-fire returned %+v, want %+v", again, a)
	}
	sink.none(t, e.m)
	select {
	case ev := <-events:
		t.Errorf("subscriber told of an unchanged re-fire: %+v", ev)
	default:
	}

	// Details alone: stored, Seq bumped, subscribers told, sinks not.
	d := drift("balances", "3 keys differ")
	d.Details = json.RawMessage(`{"keys":3}`)
	got := e.fire(d)
	if got.Seq != 2 || !got.StartsAt.Equal(t0) || !got.UpdatedAt.Equal(t0.Add(time.Minute)) || string(got.Details) != `{"keys":3}` {
		t.Errorf("details update: %+v", got)
	}
	if ev := <-events; ev.Seq != 2 {
		t.Errorf("subscriber got %+v", ev)
	}
	sink.none(t, e.m)

	// A new summary goes to the sinks too.
	got = e.fire(drift("balances", "4 keys differ"))
	if got.Seq != 3 || got.Details != nil || !got.StartsAt.Equal(t0) {
		t.Errorf("summary update: %+v", got)
	}
	if n := sink.next(t); n.Summary != "4 keys differ" || n.State != alert.StateFiring {
		t.Errorf("sink got %+v", n)
	}
	<-events

	// New labels: the sinks see the old labels' alert resolve, then the
	// new one fire.
	l := drift("balances", "4 keys differ")
	l.Labels = map[string]string{"severity": "critical"}
	e.fire(l)
	if n := sink.next(t); n.State != alert.StateResolved || n.Labels["severity"] != "warning" {
		t.Errorf("sink got %+v, want the old labels resolved", n)
	}
	if n := sink.next(t); n.State != alert.StateFiring || n.Labels["severity"] != "critical" {
		t.Errorf("sink got %+v, want the new labels firing", n)
	}
	<-events

	// Resolve.
	e.clock.Add(time.Minute)
	if err := e.m.Resolve(a.ID); err != nil {
		t.Fatal(err)
	}
	r := e.get(a.ID)
	if r.State != alert.StateResolved || r.EndsAt == nil || !r.EndsAt.Equal(t0.Add(2*time.Minute)) || r.Seq != 5 {
		t.Errorf("resolved: %+v", r)
	}
	if n := sink.next(t); n.State != alert.StateResolved {
		t.Errorf("sink got %+v", n)
	}
	if ev := <-events; ev.State != alert.StateResolved {
		t.Errorf("subscriber got %+v", ev)
	}
	if err := e.m.Resolve(a.ID); err != nil {
		t.Errorf("resolving twice: %v", err)
	}
	sink.none(t, e.m)
	if err := e.m.Resolve("drift/nothing"); !errors.Is(err, alert.ErrNotFound) {
		t.Errorf("Resolve(unknown) = %v, want ErrNotFound", err)
	}

	// Firing again starts a new episode.
	e.clock.Add(time.Minute)
	re := e.fire(drift("balances", "1 key differs"))
	if re.State != alert.StateFiring || !re.StartsAt.Equal(t0.Add(3*time.Minute)) || re.EndsAt != nil || re.Seq != 6 {
		t.Errorf("re-fired: %+v", re)
	}
	if n := sink.next(t); n.State != alert.StateFiring || n.Seq != 6 {
		t.Errorf("sink got %+v", n)
	}

	// A firing alert keeps its kind and subject.
	other := drift("balances", "x")
	other.Kind = alert.KindStoreError
	if _, err := e.m.Fire(other); !errors.Is(err, alert.ErrInvalid) {
		t.Errorf("changing the kind of a firing alert: %v, want ErrInvalid", err)
	}
	// The sink has the 6th notification, but its delivery is counted only
	// after the sink returns: Flush waits for that (and none checks that
	// nothing else was sent).
	sink.none(t, e.m)
	if v := firing(t, e.m, alert.KindDrift); v != 1 {
		t.Errorf("alerts_firing{kind=drift} = %v, want 1", v)
	}
	if v := notifications(t, e.m, "rec", "delivered"); v != 6 {
		t.Errorf("delivered notifications = %v, want 6", v)
	}
}

func TestFireInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{})
	ok := drift("balances", "s")
	for name, mod := range map[string]func(*alert.Alert){
		"empty id":        func(a *alert.Alert) { a.ID = "" },
		"id stream":       func(a *alert.Alert) { a.ID = "stream" },
		"id with space":   func(a *alert.Alert) { a.ID = "drift/a b" },
		"id leading /":    func(a *alert.Alert) { a.ID = "/drift" },
		"id trailing /":   func(a *alert.Alert) { a.ID = "drift/" },
		"unknown kind":    func(a *alert.Alert) { a.Kind = "weird" },
		"no subject":      func(a *alert.Alert) { a.Subject = "" },
		"reserved label":  func(a *alert.Alert) { a.Labels = map[string]string{"alertname": "x"} },
		"bad label name":  func(a *alert.Alert) { a.Labels = map[string]string{"team-name": "x"} },
		"__ label name":   func(a *alert.Alert) { a.Labels = map[string]string{"__name__": "x"} },
		"invalid details": func(a *alert.Alert) { a.Details = json.RawMessage(`{"a":`) },
		"too many labels": func(a *alert.Alert) {
			a.Labels = map[string]string{}
			for i := range alert.MaxLabels + 1 {
				a.Labels[fmt.Sprintf("l%d", i)] = "v"
			}
		},
	} {
		a := ok
		mod(&a)
		if _, err := e.m.Fire(a); !errors.Is(err, alert.ErrInvalid) {
			t.Errorf("%s: Fire = %v, want ErrInvalid", name, err)
		}
	}
	if n := len(e.m.List(alert.Filter{})); n != 0 {
		t.Errorf("%d alerts stored after invalid fires", n)
	}
}

func TestSync(t *testing.T) {
	t.Parallel()
	sink := newRecordingSink("rec")
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{sink}})
	ic := func(id, subject string) alert.Alert {
		return alert.Alert{ID: "integrity/" + subject + "/" + id, Summary: id}
	}
	other := e.fire(alert.Alert{ID: "integrity/orders.0/gap", Kind: alert.KindIntegrity, Subject: "orders.0", Summary: "gap"})
	sink.next(t)

	if err := e.m.Sync(alert.KindIntegrity, "payments.0", []alert.Alert{ic("a", "payments.0"), ic("b", "payments.0")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"integrity/payments.0/a", "integrity/payments.0/b"} {
		if a := e.get(id); a.State != alert.StateFiring || a.Kind != alert.KindIntegrity || a.Subject != "payments.0" {
			t.Errorf("%s: %+v", id, a)
		}
	}
	sink.next(t)
	sink.next(t)

	// b is gone: it resolves; a, unchanged, is left alone.
	e.clock.Add(time.Minute)
	if err := e.m.Sync(alert.KindIntegrity, "payments.0", []alert.Alert{ic("a", "payments.0")}); err != nil {
		t.Fatal(err)
	}
	if b := e.get("integrity/payments.0/b"); b.State != alert.StateResolved {
		t.Errorf("b after Sync without it: %+v", b)
	}
	if a := e.get("integrity/payments.0/a"); a.State != alert.StateFiring || a.Seq != 2 {
		t.Errorf("a after an unchanged Sync: %+v", a)
	}
	if n := sink.next(t); n.ID != "integrity/payments.0/b" || n.State != alert.StateResolved {
		t.Errorf("sink got %+v", n)
	}
	sink.none(t, e.m)

	// A mismatched alert refuses the whole Sync.
	bad := ic("c", "payments.0")
	bad.Subject = "payments.1"
	if err := e.m.Sync(alert.KindIntegrity, "payments.0", []alert.Alert{ic("d", "payments.0"), bad}); !errors.Is(err, alert.ErrInvalid) {
		t.Errorf("mismatched Sync = %v, want ErrInvalid", err)
	}
	if _, ok := e.m.Get("integrity/payments.0/d"); ok {
		t.Error("a refused Sync fired an alert")
	}

	// Nothing left: all of the subject's alerts resolve, others' stay.
	if err := e.m.Sync(alert.KindIntegrity, "payments.0", nil); err != nil {
		t.Fatal(err)
	}
	if a := e.get("integrity/payments.0/a"); a.State != alert.StateResolved {
		t.Errorf("a after an empty Sync: %+v", a)
	}
	if o := e.get(other.ID); o.State != alert.StateFiring || o.Seq != other.Seq {
		t.Errorf("another subject's alert changed: %+v", o)
	}
	if v := firing(t, e.m, alert.KindIntegrity); v != 1 {
		t.Errorf("alerts_firing{kind=integrity} = %v, want 1", v)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{})
	e.fire(drift("a", "1"))
	e.fire(drift("b", "2"))
	e.fire(alert.Alert{ID: "store/b", Kind: alert.KindStoreError, Subject: "b", Summary: "3"})
	e.fire(drift("c", "4"))
	if err := e.m.Resolve("drift/a"); err != nil {
		t.Fatal(err)
	}
	ids := func(as []alert.Alert) []string {
		out := []string{}
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	for _, tc := range []struct {
		f    alert.Filter
		want []string
	}{
		{alert.Filter{}, []string{"drift/a", "drift/c", "store/b", "drift/b"}},
		{alert.Filter{State: alert.StateFiring}, []string{"drift/c", "store/b", "drift/b"}},
		{alert.Filter{State: alert.StateResolved}, []string{"drift/a"}},
		{alert.Filter{Kind: alert.KindDrift}, []string{"drift/a", "drift/c", "drift/b"}},
		{alert.Filter{Subject: "b"}, []string{"store/b", "drift/b"}},
		{alert.Filter{Kind: alert.KindDrift, State: alert.StateFiring, Limit: 1}, []string{"drift/c"}},
		{alert.Filter{Kind: alert.KindIntegrity}, []string{}},
	} {
		if got := ids(e.m.List(tc.f)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("List(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{SubscriberBuffer: 2})
	e.fire(drift("a", "1"))
	e.fire(drift("b", "2"))
	e.fire(drift("c", "3"))
	if err := e.m.Resolve("drift/b"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events, _ := e.m.Subscribe(ctx)
	// The snapshot: firing alerts, oldest change first.
	for _, want := range []string{"drift/a", "drift/c"} {
		if a := <-events; a.ID != want || a.State != alert.StateFiring {
			t.Errorf("snapshot: got %s %s, want %s firing", a.ID, a.State, want)
		}
	}
	e.fire(drift("d", "4"))
	if a := <-events; a.ID != "drift/d" || a.Seq != 5 {
		t.Errorf("live: %+v", a)
	}
	// Ending the context closes the channel.
	cancel()
	if _, ok := <-events; ok {
		t.Error("channel open after the context ended")
	}

	// A subscriber that does not read is dropped, and Fire goes on.
	slow, stop := e.m.Subscribe(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			e.fire(drift(fmt.Sprintf("x%d", i), "s"))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Fire blocked on a slow subscriber")
	}
	n := 0
	for range slow {
		n++
	}
	if want := 3 + 2; n != want { // snapshot of a, c, d plus the buffer
		t.Errorf("slow subscriber got %d alerts before being dropped, want %d", n, want)
	}
	stop() // after the drop: harmless

	// Close ends every subscription.
	live, _ := e.m.Subscribe(context.Background())
	for range len(e.m.List(alert.Filter{State: alert.StateFiring})) {
		<-live
	}
	e.close()
	if _, ok := <-live; ok {
		t.Error("channel open after Close")
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{ResolvedRetention: time.Hour})
	e.fire(drift("old", "1"))
	e.fire(drift("recent", "2"))
	e.fire(drift("firing", "3"))
	if err := e.m.Resolve("drift/old"); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(50 * time.Minute)
	if err := e.m.Resolve("drift/recent"); err != nil { // Seq 5, the highest
		t.Fatal(err)
	}
	e.clock.Add(20 * time.Minute)
	e.reopen()
	if _, ok := e.m.Get("drift/old"); ok {
		t.Error("a resolved alert past the retention survived reopening")
	}
	e.get("drift/recent")
	e.get("drift/firing")

	e.clock.Add(time.Hour)
	e.reopen()
	if _, ok := e.m.Get("drift/recent"); ok {
		t.Error("drift/recent survived its retention")
	}
	if a := e.fire(drift("new", "x")); a.Seq != 6 {
		t.Errorf("Seq after pruning the latest alert = %d, want 6", a.Seq)
	}
}

func TestPersistBeforeNotify(t *testing.T) {
	t.Parallel()
	kv := newMemKV()
	sink := newRecordingSink("rec")
	m, err := alert.NewManager(kv, alert.Options{Sinks: []alert.Sink{sink}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	events, cancel := m.Subscribe(context.Background())
	defer cancel()
	kv.failSet = errors.New("disk on fire")
	if _, err := m.Fire(drift("a", "1")); err == nil {
		t.Fatal("Fire succeeded although the write failed")
	}
	if _, ok := m.Get("drift/a"); ok {
		t.Error("an alert that was not stored is served")
	}
	sink.none(t, m)
	select {
	case a := <-events:
		t.Errorf("subscriber told of an alert that was not stored: %+v", a)
	default:
	}
	kv.failSet = nil
	if a, err := m.Fire(drift("a", "1")); err != nil || a.Seq != 1 {
		t.Errorf("Fire after the failure = %+v, %v; want Seq 1", a, err)
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alert.Options{})
	e.fire(drift("a", "1"))
	m := e.m
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := m.Fire(drift("b", "2")); !errors.Is(err, alert.ErrClosed) {
		t.Errorf("Fire after Close = %v", err)
	}
	if err := m.Resolve("drift/a"); !errors.Is(err, alert.ErrClosed) {
		t.Errorf("Resolve after Close = %v", err)
	}
	if err := m.Sync(alert.KindDrift, "a", nil); !errors.Is(err, alert.ErrClosed) {
		t.Errorf("Sync after Close = %v", err)
	}
	ch, _ := m.Subscribe(context.Background())
	if _, ok := <-ch; ok {
		t.Error("Subscribe after Close gave an open channel")
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	sink := newRecordingSink("rec")
	sink.ch = make(chan alert.Alert, 10000)
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{sink}})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, _ := e.m.Subscribe(ctx)
			go func() {
				for range ch {
				}
			}()
			subject := fmt.Sprintf("s%d", w%2)
			for i := range 50 {
				a := alert.Alert{ID: fmt.Sprintf("drift/%s/%d", subject, i%5), Summary: fmt.Sprint(i)}
				switch i % 3 {
				case 0:
					a.Kind, a.Subject = alert.KindDrift, subject
					if _, err := e.m.Fire(a); err != nil {
						t.Error(err)
					}
				case 1:
					if err := e.m.Sync(alert.KindDrift, subject, []alert.Alert{a}); err != nil {
						t.Error(err)
					}
				case 2:
					_ = e.m.Resolve(a.ID)
					e.m.List(alert.Filter{State: alert.StateFiring})
				}
			}
		}()
	}
	wg.Wait()
	nFiring := len(e.m.List(alert.Filter{State: alert.StateFiring}))
	if v := firing(t, e.m, alert.KindDrift); int(v) != nFiring {
		t.Errorf("alerts_firing = %v, List says %d", v, nFiring)
	}
	// Seq is unique and dense.
	seen := map[uint64]bool{}
	for _, a := range e.m.List(alert.Filter{}) {
		if seen[a.Seq] {
			t.Errorf("Seq %d twice", a.Seq)
		}
		seen[a.Seq] = true
	}
}

func ExampleManager_Sync() {
	m, err := alert.NewManager(newMemKV(), alert.Options{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	// A derivation run finds two wrong keys in "balances" ...
	_ = m.Sync(alert.KindDrift, "balances", []alert.Alert{
		{ID: "drift/balances", Summary: "2 keys differ from the ledger"},
	})
	// ... and the next run finds none: the alert resolves.
	_ = m.Sync(alert.KindDrift, "balances", nil)
	a, _ := m.Get("drift/balances")
	fmt.Println(a.ID, a.Kind, a.Subject, a.State)
	// Output: drift/balances drift balances resolved
}

func TestDuplicateSinkNames(t *testing.T) {
	t.Parallel()
	_, err := alert.NewManager(newMemKV(), alert.Options{Logger: quiet,
		Sinks: []alert.Sink{newRecordingSink("a"), newRecordingSink("a")}})
	if err == nil {
		t.Fatal("two sinks with one name accepted")
	}
}

// FuzzFire checks that Fire either refuses an alert as invalid or stores
// one that survives a reload and renders as valid JSON everywhere.
func FuzzFire(f *testing.F) {
	f.Add("drift/balances", "balances", "3 keys differ", "severity", "critical", `{"keys":[1,2]}`)
	f.Add("integrity/payments.0/why?#%", "payments.0", "", "", "", "")
	f.Add("stream", "x", "x", "id", "x", "null")
	f.Add("a", "b\xff", "c", "__x", "y", `{"a":`)
	f.Add("drift/x", "x", "a < b & c > d", "q", "&", `{"q":"a&b<c>d\u2028","e":"\u0026"}`)
	f.Fuzz(func(t *testing.T, id, subject, summary, label, value, details string) {
		kv := newMemKV()
		m, err := alert.NewManager(kv, alert.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		a := alert.Alert{ID: id, Kind: alert.KindDrift, Subject: subject, Summary: summary}
		if label != "" {
			a.Labels = map[string]string{label: value}
		}
		if details != "" {
			a.Details = json.RawMessage(details)
		}
		got, err := m.Fire(a)
		if err != nil {
			if !errors.Is(err, alert.ErrInvalid) {
				t.Fatalf("Fire: %v, want ErrInvalid or success", err)
			}
			return
		}
		b, err := json.Marshal(got)
		if err != nil || !json.Valid(b) {
			t.Fatalf("stored alert does not marshal: %v", err)
		}
		m2, err := alert.NewManager(kv, alert.Options{Logger: quiet})
		if err != nil {
			t.Fatalf("reload: %v", err)
		}
		defer m2.Close()
		if re, ok := m2.Get(id); !ok || !reflect.DeepEqual(re, got) {
			t.Fatalf("reloaded %+v, stored %+v", re, got)
		}
		// Firing the same alert again after the reload changes nothing.
		again, err := m2.Fire(a)
		if err != nil {
			t.Fatalf("fire again after reload: %v", err)
		}
		if again.Seq != got.Seq || !again.UpdatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("a repeated Fire after a reload was taken as a change: seq %d, was %d", again.Seq, got.Seq)
		}
	})
}

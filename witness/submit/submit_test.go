package submit

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
)

type witnessFixture struct {
	srv      *server.Server
	ts       *httptest.Server
	verifier note.Verifier
	vkey     string
}

// newWitness starts an auditd witness (witness/server, Pebble state) of
// origin signed by key, on loopback.
func newWitness(t testing.TB, name, origin string, key note.Verifier) *witnessFixture {
	t.Helper()
	skey, vkey, err := witness.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := witness.ParseKey(skey)
	b, err := ledgertest.Open(t).Bucket("witness")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(b, c, []server.Log{{Origin: origin, Verifier: key}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/add-checkpoint", srv)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	v, _ := witness.NewVerifier(vkey)
	return &witnessFixture{srv: srv, ts: ts, verifier: v, vkey: vkey}
}

func appendN(t testing.TB, l *ledger.Log, n int) *ledger.SignedCheckpoint {
	t.Helper()
	es := make([]ledger.Entry, n)
	for i := range es {
		es[i] = ledger.Entry{Payload: []byte(fmt.Sprintf("e%d-%d", l.Size(), i))}
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	cp, err := l.WaitCheckpoint(context.Background(), l.Size())
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

type events struct {
	mu       sync.Mutex
	cosigned map[string]uint64
	errs     map[string]int
	changed  chan struct{}
}

func newEvents() *events {
	return &events{cosigned: map[string]uint64{}, errs: map[string]int{}, changed: make(chan struct{}, 1)}
}

func (e *events) options() Options {
	return Options{
		Logger: slog.New(slog.DiscardHandler), LogPoll: 10 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		OnCosigned: func(log, w string, size uint64) {
			e.mu.Lock()
			e.cosigned[log+" "+w] = size
			e.mu.Unlock()
			e.poke()
		},
		OnError: func(log, w string, err error) {
			e.mu.Lock()
			e.errs[log+" "+w]++
			e.mu.Unlock()
			e.poke()
		},
	}
}

func (e *events) poke() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// wait waits until cond holds (it is checked after each cosignature or
// error the submitter reports).
func (e *events) wait(t testing.TB, what string, cond func(cosigned map[string]uint64, errs map[string]int) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		e.mu.Lock()
		ok := cond(e.cosigned, e.errs)
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func run(t testing.TB, s *Submitter) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func storeLogs(s *ledger.Store) Logs {
	return func() []Log {
		var out []Log
		for _, li := range s.Logs() {
			if l, err := s.Log(li.Name); err == nil {
				out = append(out, l)
			}
		}
		return out
	}
}

// TestSubmitCosigns: the submitter learns the witness's size from a 409,
// sends the consistency proof from there, and serves the cosignature on
// the checkpoint, for each new checkpoint.
func TestSubmitCosigns(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	cp5 := appendN(t, l, 5)
	w := newWitness(t, "w1.example", l.Origin(), key.Verifier)
	// The witness already holds size 5 (from an earlier run of the log).
	if _, err := w.srv.AddCheckpoint((&witness.Request{Checkpoint: cp5.Note}).Marshal()); err != nil {
		t.Fatal(err)
	}
	cp := appendN(t, l, 300) // past a tile
	ev := newEvents()
	sub, err := New(storeLogs(store), []Witness{{URL: w.ts.URL, Verifier: w.verifier}}, ev.options())
	if err != nil {
		t.Fatal(err)
	}
	run(t, sub)
	ev.wait(t, "the cosignature of 305", func(c map[string]uint64, _ map[string]int) bool { return c["payments w1.example"] >= cp.Size })
	if got := value(sub.submissions.WithLabelValues("w1.example", "conflict")); got < 1 {
		t.Errorf("conflicts %v: the first submission (old 0) should have met a 409", got)
	}
	cp = l.Checkpoint()
	signed := sub.Cosigned("payments", cp)
	p, _ := witness.NewPolicy(1, w.vkey)
	if names, err := p.Check(signed); err != nil || len(names) != 1 {
		t.Fatalf("served checkpoint %q: policy: %v %v", signed, names, err)
	}
	if size, _, _ := w.srv.State(l.Origin()); size != cp.Size {
		t.Errorf("witness state %d, want %d", size, cp.Size)
	}
	// And the next checkpoint, from the size the witness just cosigned.
	cp = appendN(t, l, 1)
	ev.wait(t, "the next cosignature", func(c map[string]uint64, _ map[string]int) bool { return c["payments w1.example"] >= cp.Size })
	st := sub.Status("payments", cp.Size)
	if len(st) != 1 || st[0].CosignedSize == nil || *st[0].CosignedSize != cp.Size || st[0].Lag != 0 {
		t.Errorf("status %+v", st)
	}
}

// TestSubmitBadWitnesses: witnesses that are down, hang, or answer garbage
// are reported in status and metrics, never hold up appends, and do not
// keep the good witness from cosigning.
func TestSubmitBadWitnesses(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	good := newWitness(t, "good.example", l.Origin(), key.Verifier)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	garbage := func(code int, body string) string {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			w.Write([]byte(body))
		}))
		t.Cleanup(ts.Close)
		return ts.URL
	}
	forged := newWitness(t, "forged.example", l.Origin(), key.Verifier) // answers with another key's cosignature
	bad := map[string]string{
		"down.example":     down.URL,
		"hang.example":     hang.URL,
		"garbage.example":  garbage(200, "hello\n— garbage.example AAAA\n"),
		"error.example":    garbage(500, "boom"),
		"conflict.example": garbage(409, "many\n"),
		"forged.example":   forged.ts.URL,
	}
	ws := []Witness{{URL: good.ts.URL, Verifier: good.verifier}}
	for name, url := range bad {
		_, vkey, _ := witness.GenerateKey(rand.Reader, name)
		v, _ := witness.NewVerifier(vkey)
		ws = append(ws, Witness{URL: url, Verifier: v})
	}
	ev := newEvents()
	opts := ev.options()
	opts.HTTP = &http.Client{Timeout: time.Minute} // the hanging witness hangs for the whole test
	sub, err := New(storeLogs(store), ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sub)
	// Appends and their checkpoints go on while the witnesses fail.
	for range 20 {
		appendN(t, l, 3)
	}
	size := l.Checkpoint().Size
	ev.wait(t, "every failing witness's error and the good cosignature", func(c map[string]uint64, errs map[string]int) bool {
		for name := range bad {
			if name != "hang.example" && errs["payments "+name] == 0 {
				return false
			}
		}
		return c["payments good.example"] >= size
	})
	byName := map[string]Status{}
	for _, st := range sub.Status("payments", size) {
		byName[st.Witness] = st
	}
	for name := range bad {
		st := byName[name]
		if st.CosignedSize != nil || st.Lag != size {
			t.Errorf("%s: status %+v, want no cosignature and lag %d", name, st, size)
		}
		if name != "hang.example" && (st.Errors == 0 || st.LastError == "") {
			t.Errorf("%s: status %+v reports no error", name, st)
		}
		if name != "hang.example" && value(sub.submissions.WithLabelValues(name, "error")) == 0 {
			t.Errorf("%s: no error counted in auditd_witness_submissions_total", name)
		}
		if got := lagOf(t, sub, "payments", name); got != float64(size) {
			t.Errorf("%s: auditd_witness_lag_entries %v, want %d", name, got, size)
		}
	}
	if st := byName["good.example"]; st.CosignedSize == nil || *st.CosignedSize != size {
		t.Errorf("good witness: status %+v", st)
	}
	if note := sub.Cosigned("payments", l.Checkpoint()); strings.Count(string(note), "\n— ") != 2 {
		t.Errorf("served note carries %d signature lines, want the log's and the good witness's:\n%s", strings.Count(string(note), "\n— "), note)
	}
}

func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func lagOf(t testing.TB, sub *Submitter, log, w string) float64 {
	ch := make(chan prometheus.Metric, 100)
	sub.lag.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		m.Write(&d)
		labels := map[string]string{}
		for _, lp := range d.Label {
			labels[lp.GetName()] = lp.GetValue()
		}
		if labels["log"] == log && labels["witness"] == w {
			return d.Gauge.GetValue()
		}
	}
	t.Fatalf("no lag metric for %s %s", log, w)
	return 0
}

// TestSubmitLogsSelector: a witness configured with logs: gets only those
// logs' checkpoints; the others neither send it requests (which it would
// answer with errors forever) nor list it in their status or lag metric.
func TestSubmitLogsSelector(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	pay, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	ord, err := store.CreateLog("orders.eu")
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, pay, 3)
	appendN(t, ord, 4)
	// Each witness knows one log's origin only.
	wp := newWitness(t, "wp.example", pay.Origin(), key.Verifier)
	wo := newWitness(t, "wo.example", ord.Origin(), key.Verifier)
	ev := newEvents()
	sub, err := New(storeLogs(store), []Witness{
		{URL: wp.ts.URL, Verifier: wp.verifier, Logs: []string{"payments"}},
		{URL: wo.ts.URL, Verifier: wo.verifier, Logs: []string{"orders.*"}},
	}, ev.options())
	if err != nil {
		t.Fatal(err)
	}
	run(t, sub)
	ev.wait(t, "both cosignatures", func(c map[string]uint64, _ map[string]int) bool {
		return c["payments wp.example"] >= 3 && c["orders.eu wo.example"] >= 4
	})
	cp := appendN(t, ord, 2)
	ev.wait(t, "the next orders cosignature", func(c map[string]uint64, _ map[string]int) bool { return c["orders.eu wo.example"] >= cp.Size })
	ev.mu.Lock()
	errs := maps.Clone(ev.errs)
	ev.mu.Unlock()
	if len(errs) != 0 {
		t.Errorf("errors %v: a witness got a log it does not take", errs)
	}
	for log, want := range map[string]string{"payments": "wp.example", "orders.eu": "wo.example"} {
		st := sub.Status(log, 1)
		if len(st) != 1 || st[0].Witness != want {
			t.Errorf("status of %s lists %+v, want only %s", log, st, want)
		}
	}
	ch := make(chan prometheus.Metric, 16)
	sub.lag.Collect(ch)
	close(ch)
	n := 0
	for range ch {
		n++
	}
	if n != 2 {
		t.Errorf("lag series %d, want 2 (one per log and the witness that takes it)", n)
	}

	for _, bad := range []string{"", "pay[ments"} {
		if _, err := New(storeLogs(store), []Witness{{URL: wp.ts.URL, Verifier: wp.verifier, Logs: []string{bad}}}, ev.options()); err == nil {
			t.Errorf("logs %q accepted", bad)
		}
	}
}

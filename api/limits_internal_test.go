package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

// A POST waits while every write slot is taken, and goes through once one
// is free. The test ends the first POST's request context itself while no
// slot is free: the answer says it ended waiting for a write slot, which
// only that wait says, so the POST was waiting there (no sleep needed).
func TestWriteSlotsBoundPOSTs(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("limits.test"))
	srv := New(st, key.VKey, Options{Limits: Limits{CreateLogs: true, MaxConcurrentWrites: 1}, Logger: quiet})
	// arrived gets the cancel function of each request's context once the
	// request reaches the server.
	arrived := make(chan context.CancelFunc, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		arrived <- cancel
		srv.ServeHTTP(w, r.WithContext(ctx))
	}))
	defer hs.Close()
	post := func(id string) (int, string) {
		resp, err := http.Post(hs.URL+"/v1/logs/l/entries", "application/x-ndjson", strings.NewReader(`{"id":"`+id+`","payload":1}`))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	srv.writes <- struct{}{} // take the only slot
	type answer struct {
		code int
		body string
	}
	done := make(chan answer, 1)
	go func() { c, b := post("a"); done <- answer{c, b} }()
	(<-arrived)() // end the request while it waits
	if a := <-done; a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "waiting for a write slot") {
		t.Fatalf("POST while no write slot was free: %d %s, want 503 ended while waiting for a write slot", a.code, a.body)
	}
	<-srv.writes // free it
	go func() { c, b := post("b"); done <- answer{c, b} }()
	<-arrived
	if a := <-done; a.code != http.StatusOK {
		t.Fatalf("POST after the slot was freed: %d %s, want 200", a.code, a.body)
	}
	if l, err := st.Log("l"); err != nil || l.Size() != 1 {
		t.Errorf("log l after the two POSTs: %v, %v; want one entry", l, err)
	}
}

// A write slot is held while the body is read and decoded, not while the
// entries wait for their group commit: with one slot, POSTs sent together
// share group commits instead of taking one synced commit each.
func TestWriteSlotFreedOnceDecoded(t *testing.T) {
	t.Parallel()
	const posts = 8
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("limits.test"),
		ledgertest.WithLedger(ledger.WithBatchDelay(300*time.Millisecond)))
	srv := New(st, key.VKey, Options{Limits: Limits{CreateLogs: true, MaxConcurrentWrites: 1}, Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	errs := make(chan error, posts)
	for i := range posts {
		go func() {
			resp, err := http.Post(hs.URL+"/v1/logs/l/entries", "application/x-ndjson", strings.NewReader(fmt.Sprintf(`{"id":"e%d","payload":1}`, i)))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("POST e%d: %s", i, resp.Status)
				}
			}
			errs <- err
		}()
	}
	for range posts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var commits uint64
	for _, mf := range mfs {
		if mf.GetName() == "ledger_commit_batch_entries" {
			commits = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if l, err := st.Log("l"); err != nil || l.Size() != posts {
		t.Fatalf("log l: %v, %v; want %d entries", l, err, posts)
	}
	if commits == 0 || commits > posts/2 {
		t.Errorf("%d POSTs with one write slot took %d group commits; want them to share commits", posts, commits)
	}
}

// A POST's share of the byte budget counts its events, not only its bytes:
// a body of N small events is charged at least N x eventCost while it is
// read (so a budget that holds several such bodies by their bytes admits
// one), and once decoded its share is its bytes and its events' cost.
func TestBudgetCountsEvents(t *testing.T) {
	t.Parallel()
	const n = 1000
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, `{"id":"e%d","payload":%d}`+"\n", i, i)
	}
	size := int64(body.Len())
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("limits.test"))
	srv := New(st, key.VKey, Options{Limits: Limits{CreateLogs: true, MaxEvents: n, MaxInflightBytes: 64 << 20}, Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(srv)
	defer hs.Close()

	// The body is sent but for its last byte: the POST holds its share.
	c, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/logs/l/entries HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", size, body.String()[:size-1])
	for srv.budget.inUse() == 0 {
		time.Sleep(time.Millisecond)
	}
	if got, want := srv.budget.inUse(), size+n*eventCost; got < want {
		t.Errorf("a body of %d bytes and %d events holds %d bytes of the budget, want at least %d", size, n, got, want)
	}

	// Decoded: its bytes and the cost of the events it holds.
	base := srv.budget.inUse()
	a := admission{s: srv, bytes: srv.bodyCost(size)}
	if _, err := srv.budget.acquire(context.Background(), a.bytes); err != nil {
		t.Fatal(err)
	}
	a.decoded(size, 10)
	if got, want := srv.budget.inUse()-base, size+10*eventCost; got != want || a.bytes != want {
		t.Errorf("decoded with 10 events: holds %d (admission %d), want %d", got, a.bytes, want)
	}
	a.release()
}

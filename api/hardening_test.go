package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
)

// Item 8: a read token alone must not leave writes open. A POST of entries
// and a POST of a derivation run without a token are refused; with the read
// token (the only credential there is) the entry is appended.
func TestReadTokenAloneProtectsWrites(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Read: "r3ad"}}})
	for _, path := range []string{"/v1/logs/l/entries", "/v1/derivations/d/run"} {
		r := e.do(http.MethodPost, path, strings.NewReader(`{"id":"a","payload":1}`))
		if r.status != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: got %v, want 401", path, r)
		}
		r = e.do(http.MethodPost, path, strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer wrong")
		if r.status != http.StatusUnauthorized {
			t.Errorf("POST %s with a wrong token: got %v, want 401", path, r)
		}
	}
	r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer r3ad")
	if r.status != http.StatusOK {
		t.Fatalf("POST with the read token: got %v, want 200", r)
	}
	// With both tokens, the read token does not write.
	e2 := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Write: "wr1te", Read: "r3ad"}}})
	if r := e2.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(`{"id":"a","payload":1}`), "Authorization: Bearer r3ad"); r.status != http.StatusUnauthorized {
		t.Errorf("POST with the read token when a write token is set: got %v, want 401", r)
	}
}

// Item 1: two ids that differ only in their invalid bytes are both refused
// (400 with the line) instead of colliding on U+FFFD; an empty id is 400.
func TestPostRefusesInvalidUTF8IDs(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	e.post("l", "", `{"id":"x","payload":1}`)
	for _, body := range []string{
		`{"id":"y","payload":1}` + "\n" + `{"id":"bad` + "\xff\xfe" + `id","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"bad` + "\xc0\xaf" + `id","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"k","key":"` + "\xff" + `","payload":1}`,
		`{"id":"y","payload":1}` + "\n" + `{"id":"","payload":1}`,
	} {
		r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(body))
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"line":2`) {
			t.Errorf("POST %q: got %v, want 400 naming line 2", body, r)
		}
	}
	if got := e.logsSnapshot(); !strings.Contains(got, `"size":1`) {
		t.Errorf("a refused POST appended: %s", got)
	}
}

// slowPost opens a connection, sends the headers of a POST whose body is
// n bytes and the first byte of it, and returns the connection.
func slowPost(t *testing.T, addr, log string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/logs/%s/entries HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n{", log, n)
	return c
}

// Item 5: bodies trickled by as many clients as there are write slots do
// not stop writes: past the body timeout they get 408 and free the slots.
func TestSlowBodiesReleaseWriteSlots(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxConcurrentWrites: 2, BodyTimeout: timeout}}, metrics: true})
	addr := strings.TrimPrefix(e.http.URL, "http://")
	if got := e.gauge("auditd_http_write_slots"); got != 2 {
		t.Fatalf("auditd_http_write_slots %v, want 2", got)
	}
	var slow []net.Conn
	for range 2 {
		slow = append(slow, slowPost(t, addr, "l", 1000))
	}
	e.waitGauge("auditd_http_write_slots_in_use", 2) // both hold a slot
	start := time.Now()
	r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(`{"id":"a","payload":1}`))
	waited := time.Since(start)
	if r.status != http.StatusOK {
		t.Fatalf("POST behind two slow bodies: %v", r)
	}
	if waited > timeout+2*time.Second {
		t.Errorf("the POST waited %v, more than the body timeout %v plus a commit", waited, timeout)
	}
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow client %d: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"body_timeout"`) {
			t.Errorf("slow client %d: %d %s, want 408 body_timeout", i, res.StatusCode, b)
		}
	}
}

// Item 5: the read deadline ends with the body: a POST that waits for its
// checkpoint longer than the body timeout still gets its proof, and a
// second request on the same keep-alive connection is served.
func TestBodyTimeoutEndsWithTheBody(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, BodyTimeout: 200 * time.Millisecond}}, cpInterval: 600 * time.Millisecond})
	e.post("l", "", `{"id":"a","payload":1}`) // the next checkpoint is ~600ms away
	time.Sleep(300 * time.Millisecond)
	for _, id := range []string{"b", "c"} {
		out, _ := e.post("l", "wait=checkpoint", `{"id":"`+id+`","payload":1}`)
		if len(out.Entries) != 1 {
			t.Fatalf("POST %s: %+v", id, out)
		}
	}
}

// Item 6: bodies share a byte budget across requests: while one body holds
// most of it, a second POST waits (it does not decode alongside), and goes
// through once the first is done.
func TestBodiesShareAByteBudget(t *testing.T) {
	const timeout = 400 * time.Millisecond
	// At most 10 events a body: a share is its bytes and 10 events' cost.
	const held = 800<<10 + 10*768
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxBodyBytes: 1 << 20, MaxInflightBytes: 1 << 20, MaxEvents: 10, BodyTimeout: timeout}}, metrics: true})
	addr := strings.TrimPrefix(e.http.URL, "http://")
	if got := e.gauge("auditd_http_body_budget_bytes"); got != 1<<20 {
		t.Fatalf("auditd_http_body_budget_bytes %v, want %d", got, 1<<20)
	}
	slowPost(t, addr, "l", 800<<10) // holds 800 KiB of the 1 MiB budget
	e.waitGauge("auditd_http_body_budget_in_use_bytes", held)
	body := `{"id":"big","payload":"` + strings.Repeat("x", 400<<10) + `"}`
	start := time.Now()
	r := e.do(http.MethodPost, "/v1/logs/l/entries", strings.NewReader(body))
	waited := time.Since(start)
	if r.status != http.StatusOK {
		t.Fatalf("POST: %v", r)
	}
	if waited < timeout-100*time.Millisecond {
		t.Errorf("a 400 KiB body went through in %v while 800 KiB of a 1 MiB budget were held", waited)
	}
	// Small bodies fit beside a held share.
	e.waitGauge("auditd_http_body_budget_in_use_bytes", 0) // the first share is back
	slowPost(t, addr, "l", 800<<10)
	e.waitGauge("auditd_http_body_budget_in_use_bytes", held)
	start = time.Now()
	e.post("l", "", `{"id":"small","payload":1}`)
	if waited := time.Since(start); waited > timeout/2 {
		t.Errorf("a small body waited %v beside a held 800 KiB share", waited)
	}
}

// Item 4: non-canonical tile paths are refused; a malformed parameter is
// echoed cut short; start=2^64-1 does not wrap the computed end.
func TestParsingEdges(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}}})
	var body strings.Builder
	for i := range 300 {
		fmt.Fprintf(&body, `{"id":"e%d","payload":%d}`+"\n", i, i)
	}
	e.post("l", "wait=checkpoint", body.String())
	e.get("/v1/logs/l/tile/0/000.p/44", http.StatusOK)
	for _, p := range []string{"0/x000/000.p/44", "0/x000/x000/000.p/44", "0/x000/x000/x000/x000/x000/x000/000.p/44", "1/x000/000.p/1"} {
		if r := e.get("/v1/logs/l/tile/"+p, http.StatusNotFound); !strings.Contains(string(r.body), "bad_tile_path") {
			t.Errorf("tile %s: %v", p, r)
		}
	}
	// Entry bundles follow the same canonical form as hash tiles.
	e.get("/v1/logs/l/tile/entries/001.p/44", http.StatusOK)
	for _, p := range []string{"x000/001.p/44", "001.p/044", "001.p/0", "001.p/256", "001.p/", "001.p", "01", "1", "", "0001",
		"x001", "001/", "000.p/44/x", "x018/x446/x744/x073/x709/x551/999", "-01", "00a"} {
		if r := e.get("/v1/logs/l/tile/entries/"+p, http.StatusNotFound); !strings.Contains(string(r.body), "bad_tile_path") {
			t.Errorf("entries/%s: %v", p, r)
		}
	}
	huge := strings.Repeat("A", 100<<10)
	for _, path := range []string{
		"/v1/logs/l/tile/entries/" + huge,
		"/v1/logs/l/proof/inclusion?hash=" + huge,
		"/v1/logs/l/entries/" + strings.Repeat("9", 100<<10),
		"/v1/logs/l/proof/consistency?from=1&to=" + huge,
		"/v1/logs/l/tile/0/" + huge,
		"/v1/logs/l/entries?start=" + huge,
		"/v1/logs/l/entries?id=" + huge,
	} {
		r := e.do(http.MethodGet, path, nil)
		if r.status < 400 || len(r.body) > 2048 {
			t.Errorf("GET %s...: %d with a body of %d bytes, want an error under 2 KB", path[:40], r.status, len(r.body))
		}
	}
	r := e.do(http.MethodPost, "/v1/logs/l/entries?wait="+huge, strings.NewReader(`{"payload":1}`))
	if r.status != http.StatusBadRequest || len(r.body) > 2048 {
		t.Errorf("POST ?wait=<100 KB>: %d, %d bytes", r.status, len(r.body))
	}
	for _, q := range []string{"start=18446744073709551615", "start=18446744073709551000"} {
		r := e.do(http.MethodGet, "/v1/logs/l/entries?"+q, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "of a tree of size 300") || strings.Contains(string(r.body), ", 999)") {
			t.Errorf("GET entries?%s: %v, want 400 out_of_range without a wrapped end", q, r)
		}
	}
	var page struct{ Entries []json.RawMessage }
	e.getJSON("/v1/logs/l/entries?start=299", &page)
	if len(page.Entries) != 1 {
		t.Errorf("entries?start=299: %d entries", len(page.Entries))
	}
}

// Item 10: with a read token, /metrics (which names every log) needs it,
// and /readyz says only ready or not, naming no log and no error.
func TestReadTokenHidesLogNames(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Auth: api.Tokens{Read: "r3ad"}, Components: api.Components{Ready: api.ReadyFunc(func() error { return fmt.Errorf("broker secret-topic.0 unreachable") })}}, metrics: true})
	e.token = "r3ad"
	e.post("secret-log", "", `{"id":"a","payload":1}`)
	if r := e.do(http.MethodGet, "/metrics", nil); r.status != http.StatusUnauthorized || strings.Contains(string(r.body), "secret") {
		t.Errorf("GET /metrics without a token: %v", r)
	}
	if r := e.get("/metrics", http.StatusOK); !strings.Contains(string(r.body), "secret-log") {
		t.Errorf("GET /metrics with the token does not list the log")
	}
	r := e.do(http.MethodGet, "/readyz", nil)
	if r.status != http.StatusServiceUnavailable || strings.Contains(string(r.body), "secret") {
		t.Errorf("GET /readyz: %v, want 503 naming nothing", r)
	}
	// Without a read token both stay open and detailed.
	o := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true}, Components: api.Components{Ready: api.ReadyFunc(func() error { return fmt.Errorf("broker down") })}}, metrics: true})
	o.get("/metrics", http.StatusOK)
	if r := o.do(http.MethodGet, "/readyz", nil); !strings.Contains(string(r.body), "broker down") {
		t.Errorf("GET /readyz without a read token: %v, want the error", r)
	}
}

// Item 11: an HTTP id conflict with the log raises an integrity alert (as
// Kafka's violations do); a conflict inside one request does not.
func TestIDConflictRaisesAlert(t *testing.T) {
	t.Parallel()
	e, m := newAlertEnv(t, api.Options{Limits: api.Limits{CreateLogs: true}})
	e.post("orders", "", `{"id":"o-1","payload":1}`)
	r := e.do(http.MethodPost, "/v1/logs/orders/entries", strings.NewReader(`{"id":"o-2","payload":1}`+"\n"+`{"id":"o-2","payload":2}`))
	if r.status != http.StatusConflict {
		t.Fatalf("in-request conflict: %v", r)
	}
	if _, ok := m.Get("integrity/orders/id_conflict"); ok {
		t.Error("a conflict inside one request raised an integrity alert")
	}
	r = e.do(http.MethodPost, "/v1/logs/orders/entries", strings.NewReader(`{"id":"o-1","payload":2}`))
	if r.status != http.StatusConflict {
		t.Fatalf("conflict with the log: %v", r)
	}
	a, ok := m.Get("integrity/orders/id_conflict")
	if !ok || a.Kind != alert.KindIntegrity || a.Subject != "orders" || !strings.Contains(string(a.Details), `"id":"o-1"`) {
		t.Fatalf("alert after a conflict with the log: %+v (found %v)", a, ok)
	}
}

// Item 7: POSTs create at most MaxLogs logs (403 too_many_logs after, and
// nothing is created); GET /v1/logs is paginated (1,000 a page, Link rel=next).
func TestMaxLogsAndPagination(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxLogs: 3}}})
	for _, l := range []string{"a", "b", "c"} {
		e.post(l, "", `{"id":"x","payload":1}`)
	}
	r := e.do(http.MethodPost, "/v1/logs/d/entries", strings.NewReader(`{"id":"x","payload":1}`))
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), `"code":"too_many_logs"`) {
		t.Fatalf("POST creating a 4th log past MaxLogs 3: %v", r)
	}
	e.post("a", "", `{"id":"y","payload":1}`) // existing logs still take entries
	if got := e.logsSnapshot(); strings.Contains(got, `"name":"d"`) {
		t.Errorf("a refused POST created its log: %s", got)
	}

	names := make([]string, 1001)
	for i := range names {
		names[i] = fmt.Sprintf("log-%04d", i)
	}
	p := newTestEnv(t, envConfig{opts: api.Options{}, logs: names})
	var page []struct{ Name string }
	r = p.getJSON("/v1/logs", &page)
	if len(page) != 1000 || page[999].Name != "log-0999" || r.header.Get("Link") != `</v1/logs?after=log-0999>; rel="next"` {
		t.Fatalf("first page: %d logs, Link %q", len(page), r.header.Get("Link"))
	}
	r = p.getJSON("/v1/logs?after=log-0999", &page)
	if len(page) != 1 || page[0].Name != "log-1000" || r.header.Get("Link") != "" {
		t.Fatalf("second page: %+v, Link %q", page, r.header.Get("Link"))
	}
	var seen []string
	for next := "/v1/logs?limit=300"; next != ""; {
		r := p.getJSON(next, &page)
		for _, l := range page {
			seen = append(seen, l.Name)
		}
		next, _, _ = strings.Cut(strings.TrimPrefix(r.header.Get("Link"), "<"), ">")
	}
	if len(seen) != 1001 || seen[1000] != "log-1000" {
		t.Errorf("paging by 300: %d logs", len(seen))
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		p.get("/v1/logs?"+q, http.StatusBadRequest)
	}
}

// Item 7: the Go client follows the pages of GET /v1/logs.
func TestClientLogsFollowsPages(t *testing.T) {
	t.Parallel()
	names := make([]string, 2001)
	for i := range names {
		names[i] = fmt.Sprintf("l%04d", i)
	}
	p := newTestEnv(t, envConfig{logs: names})
	got, err := client.New(p.http.URL, p.verifier).Logs(context.Background())
	if err != nil || len(got) != 2001 || got[2000] != "l2000" {
		t.Fatalf("client.Logs: %d names, %v", len(got), err)
	}
}

// Item 7 of issue 28: max_logs holds under concurrency. 64 POSTs to
// distinct new names at once, MaxLogs 10: exactly 10 logs exist, every
// other POST got 403 too_many_logs, and a log that exists still takes
// entries.
func TestMaxLogsConcurrent(t *testing.T) {
	t.Parallel()
	const maxLogs, posts = 10, 64
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxLogs: maxLogs, MaxConcurrentWrites: posts}}})
	statuses := make([]response, posts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i] = e.do(http.MethodPost, fmt.Sprintf("/v1/logs/new-%02d/entries", i), strings.NewReader(`{"id":"x","payload":1}`))
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i, r := range statuses {
		switch {
		case r.status == http.StatusOK:
			created++
		case r.status == http.StatusForbidden && strings.Contains(string(r.body), `"code":"too_many_logs"`):
		default:
			t.Errorf("POST %d: %v", i, r)
		}
	}
	if n := len(e.store.Logs()); n != maxLogs || created != maxLogs {
		t.Fatalf("%d concurrent POSTs to new logs, MaxLogs %d: %d logs exist, %d POSTs succeeded; want %d and %d", posts, maxLogs, n, created, maxLogs, maxLogs)
	}
	// The logs that exist take entries at the bound.
	for _, l := range e.store.Logs() {
		e.post(l.Name, "", `{"id":"y","payload":2}`)
	}
}

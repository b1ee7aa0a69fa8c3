package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/auditd/auditd/ledger"
)

// byteBudget is a weighted semaphore over the bytes of request bodies in
// flight: a POST takes its share before reading its body and waits, in
// arrival order, while the budget is spent.
type byteBudget struct {
	mu      sync.Mutex
	free    int64
	total   int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

func newByteBudget(n int64) *byteBudget { return &byteBudget{free: n, total: n} }

// acquire takes n bytes (at most the whole budget), waiting until they are
// free or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(n, b.total)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.free >= n {
		b.free -= n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.mu.Unlock()
			b.release(n)
		default:
			for i, o := range b.waiters {
				if o == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.grant()
			b.mu.Unlock()
		}
		return 0, ctx.Err()
	}
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.free += n
	b.grant()
	b.mu.Unlock()
}

// grant wakes the waiters at the head of the queue that now fit. Called
// with mu held.
func (b *byteBudget) grant() {
	for len(b.waiters) > 0 && b.waiters[0].n <= b.free {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.free -= w.n
		close(w.ready)
	}
}

// inUse reports the bytes taken.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - b.free
}

// eventCost is what the byte budget counts for each event of a POST
// beside the body's bytes: the memory an event takes between its decoding
// and its append whatever its size (its ledger.Entry, the ledger's leaf,
// hashes and index of it, its result), about 600 bytes measured
// (docs/operations.md). Without it a body of 100,000 small events counted
// its 4 MB and took 60 MB.
const eventCost = 768

// minEventBytes is the shortest event of a body with what separates it
// from the next: {"payload":0} and a newline or comma.
const minEventBytes = 14

// bodyCost is the share of the byte budget a POST takes before reading a
// body of n bytes: n, and eventCost for each event it may hold (at most
// MaxEvents, and what n bytes can hold). Once the body is decoded the
// share shrinks to its events' cost (admission.decoded).
func (s *Server) bodyCost(n int64) int64 {
	events := min(int64(s.limits.MaxEvents), (n+1)/minEventBytes)
	return n + events*eventCost
}

// admission is a POST's hold on the write limits: a write slot while its
// body is read and decoded, and its share of the byte budget until its
// entries are in the ledger. It belongs to the request's goroutine.
type admission struct {
	s     *Server
	slot  bool  // a write slot is held
	bytes int64 // the share of the budget held
}

// decoded gives the write slot back: the body is read. Its share of the
// budget shrinks to bodyBytes and the cost of its events.
func (a *admission) decoded(bodyBytes int64, events int) {
	if n := bodyBytes + int64(events)*eventCost; n < a.bytes {
		a.s.budget.release(a.bytes - n)
		a.bytes = n
	}
	a.unslot()
}

// unslot gives the write slot back, if held.
func (a *admission) unslot() {
	if a.slot {
		a.slot = false
		<-a.s.writes
	}
}

// release gives back what is still held; safe to call more than once.
func (a *admission) release() {
	a.unslot()
	if a.bytes > 0 {
		a.s.budget.release(a.bytes)
		a.bytes = 0
	}
}

// admitWrite waits for a write slot and for the body's share of the byte
// budget (its Content-Length, or the largest body when it has none), then
// bounds the time the body may take to arrive, and records both in a.
// It reports false when the request ended while waiting (the answer is
// written, nothing is held).
func (s *Server) admitWrite(w http.ResponseWriter, r *http.Request, a *admission) bool {
	// The wait for a slot is not the client's: its body's time starts when
	// the slot is granted. Nothing reads the body meanwhile.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	select {
	case s.writes <- struct{}{}:
	case <-r.Context().Done():
		_ = rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout)) // for the unread body
		writeError(w, http.StatusServiceUnavailable, "timeout", "request ended while waiting for a write slot", nil)
		return false
	}
	body := s.limits.MaxBodyBytes
	if r.ContentLength >= 0 && r.ContentLength < body {
		body = r.ContentLength
	}
	got, err := s.budget.acquire(r.Context(), s.bodyCost(body))
	if err != nil {
		<-s.writes
		_ = rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout))
		writeError(w, http.StatusServiceUnavailable, "timeout", "request ended while waiting for memory for its body", nil)
		return false
	}
	*a = admission{s: s, slot: true, bytes: got}
	// The whole body must arrive within BodyTimeout of its slot being
	// granted: a client that trickles its body cannot hold a slot forever.
	if err := rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.log.Warn("cannot bound the body's read time", "err", err)
	}
	return true
}

// bodyRead ends the body's read deadline once it is read, so that the
// connection's background read (and a keep-alive) does not trip on it.
func bodyRead(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// isBodyTimeout reports whether err is the body read deadline passing.
func isBodyTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// maxEcho bounds the bytes of a caller's value quoted back in an error.
const maxEcho = 64

// echo quotes v for an error message, cut to maxEcho bytes: a malformed
// 100 KB parameter does not come back as a 100 KB answer.
func echo(v string) string {
	if len(v) <= maxEcho {
		return strconv.Quote(v)
	}
	cut := v[:maxEcho]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return strconv.Quote(cut) + "... (" + strconv.Itoa(len(v)) + " bytes)"
}

// maxErrorMessage bounds the "error" text of an answer, whatever it quotes.
const maxErrorMessage = 1024

func capMessage(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	cut := msg[:maxErrorMessage]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "... (cut)"
}

// maxLogsPage bounds the logs of one GET /v1/logs.
const maxLogsPage = 1000

// pageLogs returns the logs (sorted by name) after ?after=NAME, at most
// ?limit= (1..1000, default 1000), and the URL of the next page ("" on
// the last).
func pageLogs(all []ledger.LogInfo, r *http.Request) ([]ledger.LogInfo, string, error) {
	q := r.URL.Query()
	limit := uint64(maxLogsPage)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 || n > maxLogsPage {
			return nil, "", errors.New("limit must be 1..1000")
		}
		limit = n
	}
	after := q.Get("after")
	i := sort.Search(len(all), func(i int) bool { return all[i].Name > after })
	page := all[i:min(len(all), i+int(limit))]
	if i+len(page) >= len(all) || len(page) == 0 {
		return page, "", nil
	}
	next := url.Values{"after": {page[len(page)-1].Name}}
	if q.Has("limit") {
		next.Set("limit", strconv.FormatUint(limit, 10))
	}
	return page, r.URL.Path + "?" + next.Encode(), nil
}

// tooManyLogs answers 403 too_many_logs when a POST would create a log
// past MaxLogs, before its body is read. Concurrent POSTs to new names may
// pass this check together: the ledger's LogForAppendMax, after the body,
// is the check that holds.
func (s *Server) tooManyLogs(w http.ResponseWriter) bool {
	if s.limits.MaxLogs <= 0 {
		return false
	}
	if n := len(s.store.Logs()); n >= s.limits.MaxLogs {
		writeTooManyLogs(w, n, s.limits.MaxLogs)
		return true
	}
	return false
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func writeTooManyLogs(w http.ResponseWriter, n, limit int) {
	writeError(w, http.StatusForbidden, "too_many_logs",
		fmt.Sprintf("the server holds %d logs, its maximum; a POST creates no more", n), map[string]any{"limit": limit})
}

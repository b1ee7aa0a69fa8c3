package api

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// defaultBodyTimeout is Limits.BodyTimeout's default.
const defaultBodyTimeout = 30 * time.Second

// BodyDeadline bounds the time the body of every request next serves may
// take to arrive: timeout (the default 30s when not positive) from the
// request's start, by the connection's read deadline. A body that does not
// arrive in time fails its reads with os.ErrDeadlineExceeded; one the
// handler does not read fails the server's own attempt to skip it once the
// handler has answered, and the connection is closed. Without it a client
// holds a connection and its goroutine forever by sending headers that
// announce a body and then withholding it, on any route: the server reads
// the body of an unread request before it sends the answer.
//
// Requests without a body keep no deadline, so that event streams and
// long polls are not cut, and a body's deadline ends once it is read to
// its end (the server then watches the connection for the client going).
// A handler may move the deadline (the POSTs of entries restart it when
// their write slot is granted). A request is bounded once: a second
// BodyDeadline on its way changes nothing.
//
// Server.ServeHTTP applies it with Limits.BodyTimeout; wrap the other
// handlers a listener serves (the status page, the debug listener).
func BodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = defaultBodyTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		boundBody(w, r, timeout)
		next.ServeHTTP(w, r)
	})
}

// boundBody sets the read deadline of r's body to now+timeout (see
// BodyDeadline), unless it has none or is bounded already.
func boundBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	if _, ok := r.Body.(*deadlineBody); ok {
		return
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		// Only a ResponseWriter that cannot (httptest.ResponseRecorder):
		// there is no connection to hold.
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}

// deadlineBody ends the read deadline once the body is read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

package api_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/auditd/auditd/api"
)

// With one write slot, a second POST waits until the first, whose body is
// still arriving, is done; then both succeed.
func TestConcurrentWritesBounded(t *testing.T) {
	e := newTestEnv(t, envConfig{opts: api.Options{CreateLogs: true, MaxConcurrentWrites: 1}})
	pr, pw := io.Pipe()
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(e.http.URL+"/v1/logs/slow/entries", "application/x-ndjson", pr)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	io.WriteString(pw, `{"id":"a","payload":1}`+"\n") // the first POST holds the slot now
	second := make(chan int, 1)
	go func() {
		_, r := e.post("fast", "", `{"id":"b","payload":2}`)
		second <- r.status
	}()
	select {
	case code := <-second:
		t.Fatalf("second POST finished (%d) while the first held the only write slot", code)
	case <-time.After(300 * time.Millisecond):
	}
	pw.Close()
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first POST: %d", code)
	}
	if code := <-second; code != http.StatusOK {
		t.Fatalf("second POST: %d", code)
	}
}

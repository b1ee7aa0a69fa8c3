package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/internal/ledgertest"
)

// A POST waits while every write slot is taken, and goes through once one
// is free.
func TestWriteSlotsBoundPOSTs(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	st, key := ledgertest.OpenKey(t, ledgertest.WithKeyName("limits.test"))
	vkey := key.VKey
	srv := New(st, vkey, Options{CreateLogs: true, MaxConcurrentWrites: 1, Logger: quiet})
	hs := httptest.NewServer(srv)
	defer hs.Close()

	srv.writes <- struct{}{} // take the only slot
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(hs.URL+"/v1/logs/l/entries", "application/x-ndjson", strings.NewReader(`{"id":"a","payload":1}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("POST finished (%d) while no write slot was free", code)
	case <-time.After(200 * time.Millisecond):
	}
	<-srv.writes // free it
	if code := <-done; code != http.StatusOK {
		t.Fatalf("POST after the slot was freed: %d, want 200", code)
	}
}

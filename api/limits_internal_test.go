package api

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
)

// A POST waits while every write slot is taken, and goes through once one
// is free.
func TestWriteSlotsBoundPOSTs(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "limits.test")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := ledger.Open(t.TempDir(), signer, verifier, ledger.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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

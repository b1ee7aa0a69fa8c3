package rederive_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/rederive"
)

// TestRemoteVerificationMessage: a checkpoint that does not verify with the
// key given is a rederive.ErrVerification whose message says "verification
// failed" once, not the client's own prefix again behind rederive's.
func TestRemoteVerificationMessage(t *testing.T) {
	s := newRemoteTestServer(t)
	_, other, err := note.GenerateKey(rand.Reader, "rederive-remote-test.example")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := note.NewVerifier(other)
	rl := &rederive.RemoteLedger{Client: client.New(s.url, v)}
	_, _, err = rl.Pin(context.Background(), "payments")
	if !errors.Is(err, rederive.ErrVerification) {
		t.Fatalf("pin with another key: %v", err)
	}
	if n := strings.Count(err.Error(), "verification failed"); n != 1 || !strings.Contains(err.Error(), "checkpoint of payments") {
		t.Errorf("%q: %d times \"verification failed\"", err, n)
	}
}

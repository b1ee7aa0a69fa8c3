package checkers_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/redirect"
)

// Issue 28 item 8: a peer's token never goes to another origin (here the
// same host, another port: net/http keeps Authorization then) through a
// redirect, neither when its logs are listed nor when a checkpoint is
// fetched; the comparison fails saying why.
func TestPeerRedirectOtherOrigin(t *testing.T) {
	var got atomic.Value
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Path + " Authorization: " + r.Header.Get("Authorization"))
		http.NotFound(w, r)
	}))
	defer b.Close()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.URL+r.URL.Path, http.StatusFound)
	}))
	defer a.Close()
	us := newPeerNode(t, newKey(t))
	us.fill(t, peerLog, 0, 3, honestEntry)
	for _, logs := range [][]string{nil, {peerLog}} { // listed by the peer; configured
		pc, err := checkers.NewPeerCheck(us.store, []checkers.Peer{{URL: a.URL, Verifier: newKey(t).verifier, Token: "s3cret", Logs: logs}})
		if err != nil {
			t.Fatal(err)
		}
		if err := pc.Run(context.Background(), &collector{}); !errors.Is(err, redirect.ErrCrossOrigin) {
			t.Errorf("logs %v: Run through a redirect to another origin: %v, want a refusal", logs, err)
		}
		if g := got.Load(); g != nil {
			t.Fatalf("logs %v: the other origin received %s", logs, g)
		}
	}
}

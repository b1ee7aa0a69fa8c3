package client_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/redirect"
)

// Issue 28 item 8: the client's token never goes to another origin (here
// the same host, another port: net/http keeps Authorization then) through
// a redirect; the request fails saying why.
func TestClientRedirectOtherOrigin(t *testing.T) {
	var got atomic.Value
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		http.NotFound(w, r)
	}))
	defer b.Close()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.URL+r.URL.Path, http.StatusFound)
	}))
	defer a.Close()
	_, vkey, err := note.GenerateKey(rand.Reader, "redirect.example")
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = client.New(a.URL, v, client.WithToken("s3cret")).Checkpoint(context.Background(), "orders")
	if !errors.Is(err, redirect.ErrCrossOrigin) {
		t.Errorf("Checkpoint through a redirect to another origin: %v, want a refusal", err)
	}
	if h := got.Load(); h != nil {
		t.Errorf("the other origin received a request (Authorization %q)", h)
	}
}

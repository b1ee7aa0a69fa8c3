package alert_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/internal/redirect"
)

// Issue 28 item 8: a webhook's configured headers never go to another
// origin through a redirect (net/http would forward X-Api-Key, and
// Authorization to another port); the POST fails at once, without retries.
func TestWebhookRedirectOtherOrigin(t *testing.T) {
	var hits atomic.Int32
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer b.Close()
	var posts atomic.Int32
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Redirect(w, r, b.URL+"/hook", http.StatusTemporaryRedirect)
	}))
	defer a.Close()
	hook := alert.NewWebhook(alert.WebhookConfig{URL: a.URL + "/hook", Headers: map[string]string{"X-Api-Key": "s3cret"},
		InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	err := hook.Notify(context.Background(), []alert.Alert{{ID: "x", Kind: alert.KindIntegrity, Subject: "s", Summary: "s"}})
	if !errors.Is(err, redirect.ErrCrossOrigin) {
		t.Errorf("Notify through a redirect to another origin: %v, want a refusal", err)
	}
	if hits.Load() != 0 {
		t.Errorf("the other origin received %d requests", hits.Load())
	}
	if posts.Load() != 1 {
		t.Errorf("%d POSTs: a refused redirect is retried", posts.Load())
	}
}

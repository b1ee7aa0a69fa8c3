package store

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/auditd/auditd/internal/redirect"
)

// Issue 28 item 8: the HTTP store does not follow a redirect to another
// origin (here the same host, another port), so its configured headers
// (X-Api-Key) never reach it, and Check says why; a redirect within the
// configured origin is followed, the headers with it.
func TestHTTPStoreRedirects(t *testing.T) {
	var mu sync.Mutex
	var gotB []string // X-Api-Key values B received
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotB = append(gotB, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`[{"key":"a","value":1}]`))
	}))
	defer b.Close()
	var gotA []string // X-Api-Key values /rows on A received
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/elsewhere":
			http.Redirect(w, r, b.URL+"/rows", http.StatusFound)
		case "/moved":
			http.Redirect(w, r, "/rows", http.StatusMovedPermanently)
		case "/rows":
			mu.Lock()
			gotA = append(gotA, r.Header.Get("X-Api-Key"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"key":"a","value":1}]`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer a.Close()
	open := func(path string) Store {
		t.Helper()
		s, err := Open(context.Background(), Config{HTTP: &HTTPConfig{URL: a.URL + path, Headers: map[string]string{"X-Api-Key": "s3cret"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}

	err := open("/elsewhere").Check(context.Background())
	if err == nil || !errors.Is(err, redirect.ErrCrossOrigin) || !errors.Is(err, ErrStore) ||
		!strings.Contains(err.Error(), a.URL) || !strings.Contains(err.Error(), b.URL) {
		t.Errorf("Check through a redirect to another port: %v, want a store error naming both origins", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the header: %v", err)
	}
	mu.Lock()
	if len(gotB) != 0 {
		t.Errorf("the other origin received %d requests (X-Api-Key %q)", len(gotB), gotB)
	}
	mu.Unlock()

	if err := open("/moved").Check(context.Background()); err != nil {
		t.Errorf("Check through a redirect within the origin: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gotA) != 1 || gotA[0] != "s3cret" {
		t.Errorf("the redirect within the origin got X-Api-Key %q, want the configured header", gotA)
	}
}

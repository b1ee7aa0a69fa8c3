package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// Issue 28 item 8: status and alerts send their token to the server given
// only: a redirect to another origin (here the same host, another port:
// net/http keeps Authorization then) is refused, saying so.
func TestStatusRedirectOtherOrigin(t *testing.T) {
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
	for name, run := range map[string]func([]string, *bytes.Buffer, *bytes.Buffer) int{
		"status": func(args []string, o, e *bytes.Buffer) int { return runStatus(args, o, e) },
		"alerts": func(args []string, o, e *bytes.Buffer) int { return runAlerts(args, o, e) },
	} {
		var out, errb bytes.Buffer
		code := run([]string{"--server", a.URL, "--token", "s3cret"}, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "redirect to another origin refused") {
			t.Errorf("%s through a redirect to another origin: exit %d\n%s%s", name, code, out.String(), errb.String())
		}
		if g := got.Load(); g != nil {
			t.Fatalf("%s: the other origin received %s", name, g)
		}
	}
}

package redirect

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func TestOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://Example.org/a?b":         "http://example.org:80",
		"http://example.org:80/":         "http://example.org:80",
		"HTTPS://user:pw@example.org/x":  "https://example.org:443",
		"https://example.org:8443":       "https://example.org:8443",
		"http://[::1]:8080/path":         "http://[::1]:8080",
		"http://127.0.0.1:9/?token=s3cr": "http://127.0.0.1:9",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := Origin(u); got != want {
			t.Errorf("Origin(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	req := func(s string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := []*http.Request{req("http://a.example:8080/x?token=1")}
	for _, ok := range []string{"http://a.example:8080/y", "http://A.example:8080/", "http://a.example:8080/x?page=2"} {
		if err := SameOrigin(req(ok), first); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://a.example:8081/x", "https://a.example:8080/x", "http://b.example:8080/x", "http://evil.a.example:8080/x"} {
		err := SameOrigin(req(bad), first)
		if !errors.Is(err, ErrCrossOrigin) || !strings.Contains(err.Error(), "http://a.example:8080 redirected to ") {
			t.Errorf("%s: %v, want a refusal", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "token=1") {
			t.Errorf("the error shows the query: %v", err)
		}
	}
	// A chain that leaves and comes back is judged by each hop against the
	// first request's origin.
	via := make([]*http.Request, MaxRedirects)
	for i := range via {
		via[i] = first[0]
	}
	if err := SameOrigin(req("http://a.example:8080/z"), via); err == nil {
		t.Errorf("redirect %d followed", MaxRedirects+1)
	}
}

// TestClientWithSameOrigin: an http.Client with SameOrigin sends a
// custom header to a server that redirects to another port never to that
// port; net/http's default policy does (what this package is for).
func TestClientWithSameOrigin(t *testing.T) {
	var hits atomic.Int32
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer b.Close()
	a := httptest.NewServer(http.RedirectHandler(b.URL, http.StatusTemporaryRedirect))
	defer a.Close()
	get := func(c *http.Client) error {
		r, _ := http.NewRequest(http.MethodGet, a.URL, nil)
		r.Header.Set("X-Api-Key", "s3cret")
		resp, err := c.Do(r)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(&http.Client{CheckRedirect: SameOrigin}); !errors.Is(err, ErrCrossOrigin) || hits.Load() != 0 {
		t.Errorf("SameOrigin: %v, %d requests to the other origin", err, hits.Load())
	}
	if err := get(&http.Client{}); err != nil || hits.Load() != 1 {
		t.Errorf("the default policy: %v, %d requests to the other origin (the premise of this package)", err, hits.Load())
	}
}

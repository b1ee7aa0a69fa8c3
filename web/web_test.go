package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/auditd/auditd/web"
)

// TestMount: the page and its assets are served from the binary with a
// strict Content-Security-Policy, other paths reach the API, and the page
// refers to no other origin (no CDN).
func TestMount(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	srv := httptest.NewServer(web.Mount(api))
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, page := get("/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(page, `src="/ui/app.js"`) {
		t.Fatalf("GET /: %s %q", resp.Status, page[:min(len(page), 200)])
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	external := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`)
	for _, p := range []string{"/ui/app.js", "/ui/verify.js", "/ui/style.css"} {
		resp, body := get(p)
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Errorf("GET %s: %s", p, resp.Status)
		}
		if strings.Contains(body, "https://") && p != "/ui/verify.js" {
			t.Errorf("%s refers to another origin", p)
		}
	}
	if external.MatchString(page) {
		t.Error("the page loads something from another origin")
	}
	if resp, body := get("/v1/logs"); body != "api /v1/logs" {
		t.Errorf("GET /v1/logs reached %q (%s)", body, resp.Status)
	}
	if resp, _ := get("/ui/"); resp.StatusCode != 404 {
		t.Errorf("GET /ui/ (a directory listing): %s", resp.Status)
	}
	if resp, _ := get("/ui/nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope.js: %s", resp.Status)
	}
	r, _ := http.Post(srv.URL+"/", "text/plain", nil)
	if r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %s", r.Status)
	}
}

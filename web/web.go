// Package web is auditd's status page: static HTML, CSS and JavaScript
// embedded in the binary (no build step, nothing fetched from elsewhere)
// that read the JSON API of the server that serves them. The page shows
// logs, derivations, checks and live alerts, and verifies an entry in the
// browser: the checkpoint's Ed25519 signature against a verifier key the
// user gives (WebCrypto), the leaf recomputed from the entry's fields
// (docs/ledger-format.md) and the inclusion proof (RFC 6962, SHA-256 in
// SubtleCrypto).
//
// The assets hold no data: they are served without a token, and the page
// sends the read token the user pastes (kept in the tab's sessionStorage)
// on every API request it makes.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the page at "/" and its assets under "/ui/". Every other
// path answers 404; mount it so that only those reach it.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Only the page's own scripts and styles, and requests to this
		// server; no framing (clickjacking), no referrer to other sites.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		switch {
		case r.URL.Path == "/":
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/index.html"
			serveFile(files, w, r2)
		case strings.HasPrefix(r.URL.Path, "/ui/") && !strings.HasSuffix(r.URL.Path, "/"):
			r2 := r.Clone(r.Context())
			r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui")
			serveFile(files, w, r2)
		default:
			http.NotFound(w, r)
		}
	})
}

// serveFile serves one file; FileServer would redirect /index.html to /.
func serveFile(files http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/index.html" {
		b, err := static.ReadFile("static/index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
		return
	}
	files.ServeHTTP(w, r)
}

// Mount returns a handler that serves the page (GET / and /ui/...) and
// passes every other request to api.
func Mount(api http.Handler) http.Handler {
	page := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/") {
			page.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

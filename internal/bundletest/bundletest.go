// Package bundletest helps tests of readers of combined bundles
// (GET /v1/logs/{log}/bundles/<N>[.p/<W>], api/bundles.go): a test proxy
// that lies in entry bundles and payload bundles lies the same way in the
// combined bundles it serves, so every tampering test of the parts runs
// through the combined path too.
package bundletest

import (
	"encoding/binary"
	"io"
	"net/http"
	"strings"
)

// watermarkHeader is the pruning watermark a payload bundle carries.
const watermarkHeader = "Auditd-Prune-Watermark"

// Parts returns the entry bundle and payload bundle paths whose join is
// the combined bundle at path, or ok false if path is not one.
func Parts(path string) (entries, payloads string, ok bool) {
	i := strings.LastIndex(path, "/bundles/")
	if i < 0 {
		return "", "", false
	}
	base, rest := path[:i], path[i+len("/bundles/"):]
	return base + "/tile/entries/" + rest, base + "/payloads/" + rest, true
}

// Join is a combined bundle: the entry bundle's u32 length, the entry
// bundle, the payload bundle.
func Join(entries, payloads []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(entries)+len(payloads)), uint32(len(entries)))
	return append(append(b, entries...), payloads...)
}

// ServeCombined answers r if it asks for a combined bundle, and reports
// whether it did: it fetches the two parts from self (the test proxy's own
// URL, so they go through its rewriting) and joins them. A part that is
// not 200 is answered as it came, with its watermark header.
func ServeCombined(w http.ResponseWriter, r *http.Request, self string) bool {
	ep, pp, ok := Parts(r.URL.Path)
	if !ok {
		return false
	}
	var parts [2][]byte
	for i, p := range []string{ep, pp} {
		resp, err := http.Get(self + p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return true
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return true
		}
		if wm := resp.Header.Get(watermarkHeader); wm != "" {
			w.Header().Set(watermarkHeader, wm)
		}
		if resp.StatusCode != http.StatusOK {
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(resp.StatusCode)
			w.Write(b)
			return true
		}
		parts[i] = b
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(Join(parts[0], parts[1]))
	return true
}

// Proxy serves upstream, its status, body, content type and watermark
// header.
func Proxy(upstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forward(w, r, upstream) })
}

// NoCombined answers 404 without a watermark header to combined bundles,
// as a server from before them, and serves the rest from upstream: a
// client then reads the entry and payload bundles apart.
func NoCombined(upstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := Parts(r.URL.Path); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not found"}`)
			return
		}
		forward(w, r, upstream)
	})
}

func forward(w http.ResponseWriter, r *http.Request, upstream string) {
	resp, err := http.Get(upstream + r.URL.RequestURI())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", watermarkHeader} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

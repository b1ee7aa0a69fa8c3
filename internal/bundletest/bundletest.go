// Package bundletest helps tests of readers of combined bundles
// (GET /v1/logs/{log}/bundles/<N>[.p/<W>], api/bundles.go): a test proxy
// that lies in entry bundles and payload bundles lies the same way in the
// combined bundles it serves, so every tampering test of the parts runs
// through the combined path too.
package bundletest

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
// URL, so they go through its rewriting) and joins them; for ?count=K, the
// K bundles from N, each preceded by its u32 length. A part that is not 200
// is answered as it came, with its watermark header.
func ServeCombined(w http.ResponseWriter, r *http.Request, self string) bool {
	ep, _, ok := Parts(r.URL.Path)
	if !ok {
		return false
	}
	count := 1
	if c := r.URL.Query().Get("count"); c != "" {
		var err error
		if count, err = strconv.Atoi(c); err != nil || count < 1 {
			http.Error(w, "bad count", http.StatusNotFound)
			return true
		}
	}
	base, rest := ep[:strings.LastIndex(ep, "/tile/entries/")], ep[strings.LastIndex(ep, "/tile/entries/")+len("/tile/entries/"):]
	n, ok := parseIndex(rest)
	if !ok && count > 1 {
		http.Error(w, "bad path", http.StatusNotFound)
		return true
	}
	var out []byte
	for i := range count {
		idx := rest
		if count > 1 {
			idx = formatIndex(n + uint64(i))
		}
		var parts [2][]byte
		for j, p := range []string{base + "/tile/entries/" + idx, base + "/payloads/" + idx} {
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
			parts[j] = b
		}
		one := Join(parts[0], parts[1])
		if count > 1 {
			out = binary.BigEndian.AppendUint32(out, uint32(len(one)))
		}
		out = append(out, one...)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(out)
	return true
}

// parseIndex parses a full bundle's index path, "x001/234".
func parseIndex(p string) (uint64, bool) {
	var n uint64
	for _, el := range strings.Split(p, "/") {
		d, err := strconv.Atoi(strings.TrimPrefix(el, "x"))
		if err != nil || len(el) < 3 {
			return 0, false
		}
		n = n*1000 + uint64(d)
	}
	return n, true
}

// formatIndex is the index path of bundle n.
func formatIndex(n uint64) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n /= 1000; n > 0; n /= 1000 {
		s = fmt.Sprintf("x%03d/", n%1000) + s
	}
	return s
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

package api

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// serveTile writes b, a hash tile or (bundle true) an entry bundle, as an
// immutable resource (cacheTile) with an ETag: a request whose
// If-None-Match names it gets 304 and no body.
//
// An entry bundle goes gzip-compressed to a request that accepts gzip
// (C2SP tlog-tiles: entry bundles SHOULD be compressed at the HTTP layer),
// and as it is to one that does not (no Accept-Encoding, or gzip;q=0);
// either answer says Vary: Accept-Encoding. Hash tiles are SHA-256 output and do not
// compress: they go as they are.
//
// The ETag is the first 128 bits of the SHA-256 of the uncompressed bytes,
// strong for them; the gzip form's is weak (W/"<hex>-gzip"), as its bytes
// depend on the compressor's version.
func serveTile(w http.ResponseWriter, r *http.Request, b []byte, bundle bool) {
	serveBytes(w, r, b, bundle, cacheTile)
}

// serveBytes is serveTile with the Cache-Control cc; compress says whether
// the bytes may go gzip-compressed.
func serveBytes(w http.ResponseWriter, r *http.Request, b []byte, compress bool, cc string) {
	sum := sha256.Sum256(b)
	serveBytesTag(w, r, b, compress, cc, sum[:16])
}

// serveBytesTag is serveBytes with the ETag's 128 bits given: a digest
// that changes whenever b's bytes do, as their SHA-256 does (bundles.go
// digests the leaf hashes, which commit to the bytes, not the bytes).
func serveBytesTag(w http.ResponseWriter, r *http.Request, b []byte, compress bool, cc string, sum []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", cc)
	gz := false
	if compress {
		h.Set("Vary", "Accept-Encoding")
		gz = acceptsGzip(r.Header.Get("Accept-Encoding"))
	}
	tag := make([]byte, 0, 2+2+32+5+1)
	if gz {
		tag = append(tag, 'W', '/')
	}
	tag = append(tag, '"')
	tag = hex.AppendEncode(tag, sum)
	if gz {
		tag = append(tag, "-gzip"...)
	}
	tag = append(tag, '"')
	etag := string(tag)
	h.Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if gz {
		buf := gzipBuffers.Get().(*bytes.Buffer)
		defer gzipBuffers.Put(buf)
		buf.Reset()
		gzipTo(buf, b)
		b = buf.Bytes()
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// gzipLevel is the compression of entry bundles: the default level saves
// little more for about twice the time (docs/perf/decisions.md).
const gzipLevel = gzip.BestSpeed

var (
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(nil, gzipLevel)
		return zw
	}}
	gzipBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// gzipTo writes b gzip-compressed to buf.
func gzipTo(buf *bytes.Buffer, b []byte) {
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(buf)
	zw.Write(b) // a bytes.Buffer does not fail
	zw.Close()
}

// acceptsGzip reports whether an Accept-Encoding header value accepts gzip
// (RFC 9110, section 12.5.3): gzip, x-gzip or * with a non-zero q.
func acceptsGzip(ae string) bool {
	for ae != "" {
		var item string
		item, ae, _ = strings.Cut(ae, ",")
		coding, params, _ := strings.Cut(item, ";")
		coding = strings.TrimSpace(coding)
		if !strings.EqualFold(coding, "gzip") && !strings.EqualFold(coding, "x-gzip") && coding != "*" {
			continue
		}
		return !zeroQ(params)
	}
	return false
}

// zeroQ reports whether the parameters of an Accept-Encoding item give
// q=0 (q=0, q=0.0, q=0.00, q=0.000).
func zeroQ(params string) bool {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			v = strings.TrimSpace(v)
			return v != "" && strings.Trim(v, "0.") == "" && v[0] == '0'
		}
	}
	return false
}

// etagMatches reports whether an If-None-Match header value names etag,
// by the weak comparison RFC 9110 (section 13.1.2) asks for: "*", or an
// entity tag whose opaque part equals etag's, either of them weak or not.
func etagMatches(inm, etag string) bool {
	if strings.TrimSpace(inm) == "*" {
		return true
	}
	want := strings.TrimPrefix(etag, "W/")
	for {
		inm = strings.TrimLeft(inm, " \t,")
		if inm == "" {
			return false
		}
		inm = strings.TrimPrefix(inm, "W/")
		if inm[0] != '"' {
			return false // not an entity tag: the rest cannot be read
		}
		end := strings.IndexByte(inm[1:], '"')
		if end < 0 {
			return false
		}
		if inm[:end+2] == want {
			return true
		}
		inm = inm[end+2:]
	}
}

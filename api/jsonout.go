package api

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/auditd/auditd/merkle"
)

// The answer to a POST of entries is written by hand rather than through
// encoding/json's reflection: it is the one answer sent once per event.
// appendAppendOut writes exactly the bytes writeJSON writes for the same
// appendOut (TestAppendOutJSON and FuzzAppendOutJSON hold it to that).

var (
	jsonContentType = []string{"application/json"}
	outBufs         = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}
)

// unchunkedBody is the size up to which net/http sets the Content-Length
// of an answer written in one Write itself (its bufferBeforeChunkingSize),
// without allocating for it.
const unchunkedBody = 2048

// writeAppended answers 200 with out in one Write, with a Content-Length
// (never chunked, whatever its size).
func writeAppended(w http.ResponseWriter, out *appendOut) {
	bp := outBufs.Get().(*[]byte)
	b := appendAppendOut((*bp)[:0], out)
	h := w.Header()
	h["Content-Type"] = jsonContentType
	if len(b) >= unchunkedBody {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	_, _ = w.Write(b)
	if cap(b) <= 256<<10 { // a large answer (proofs for a big batch) is not kept; a 1,000-entry one without proofs (~160 KiB) is
		*bp = b
		outBufs.Put(bp)
	}
}

// appendAppendOut appends out as encoding/json encodes it (with HTML
// escaping off, as writeJSON), newline included.
func appendAppendOut(b []byte, out *appendOut) []byte {
	b = append(b, `{"size":`...)
	b = strconv.AppendUint(b, out.Size, 10)
	b = append(b, `,"entries":[`...)
	if n := len(out.Entries); n > 0 {
		// One growth for the lot: the entry objects without proofs are
		// about 120 bytes beside their ids.
		b = slices.Grow(b, n*(120+len(out.Entries[0].ID)))
	}
	for i := range out.Entries {
		e := &out.Entries[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendUint(b, e.Index, 10)
		b = append(b, `,"id":`...)
		b = appendJSONString(b, e.ID)
		b = append(b, `,"leaf_hash":`...)
		b = appendJSONHash(b, e.LeafHash)
		b = append(b, `,"duplicate":`...)
		b = strconv.AppendBool(b, e.Duplicate)
		if e.InclusionProof != nil {
			b = append(b, `,"inclusion_proof":[`...)
			for j, h := range e.InclusionProof {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONHash(b, h)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if out.Checkpoint != "" {
		b = append(b, `,"checkpoint":`...)
		b = appendJSONString(b, out.Checkpoint)
	}
	return append(b, "}\n"...)
}

func appendJSONHash(b []byte, h merkle.Hash) []byte {
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, h[:])
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json
// writes it with HTML escaping off: invalid UTF-8 becomes U+FFFD, and
// U+2028 and U+2029 are escaped for JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package ingest

import (
	"encoding/base64"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// The fast path decodes an event object of the usual shape in one pass:
// each field once, by its exact name, with plain string values, and the
// payload validated and compacted as it is copied out. Anything else (an
// escape in a name or an id, a field in another case, a duplicate, a
// null, any mistake) is left to the slow path, encoding/json as before,
// which also words every error: so the fast path only has to be exact
// about what it accepts.

type fastStatus uint8

const (
	fastOK   fastStatus = iota
	fastMore            // the event goes on past the bytes read
	fastBail            // not for the fast path: decode it the slow way
)

// Field bits, in the order of Event's fields.
const (
	fID = 1 << iota
	fKey
	fKeyBase64
	fTime
	fPayload
	fPayloadBase64
)

// maxFastDepth bounds the nesting the fast path follows (encoding/json
// takes 10,000 levels; deeper payloads go the slow way).
const maxFastDepth = 256

// fields are the spans of an event's values in b: strings without their
// quotes, the payload as sent.
type fields struct {
	seen                                 uint8
	id, key, keyB64, tm, payload, payB64 []byte
	payloadSpace                         int // bytes of insignificant space in the payload
}

// fastEvent decodes the event object starting at b[0] ('{'), returning
// the entry and the length of the object. oneLine refuses an event that
// spans lines (NDJSON).
func (d *decoder) fastEvent(b []byte, oneLine bool) (ledger.Entry, int, fastStatus) {
	var f fields
	n, st := f.scan(b, oneLine)
	if st != fastOK {
		return ledger.Entry{}, 0, st
	}
	e, ok := d.fastEntry(&f, len(b)-n)
	if !ok {
		return ledger.Entry{}, 0, fastBail
	}
	return e, n, fastOK
}

// scan reads the object's fields into f.
func (f *fields) scan(b []byte, oneLine bool) (int, fastStatus) {
	i := 1
	for {
		var st fastStatus
		if i, st = skipSpace(b, i, oneLine, nil); st != fastOK {
			return 0, st
		}
		if b[i] != '"' {
			return 0, fastBail // '}' of an empty object (an error), or a mistake
		}
		bit, end, st := fieldName(b, i)
		if st != fastOK {
			return 0, st
		}
		if f.seen&bit != 0 {
			return 0, fastBail // a duplicate: the last one wins, the slow way
		}
		f.seen |= bit
		if i, st = skipSpace(b, end, oneLine, nil); st != fastOK {
			return 0, st
		}
		if b[i] != ':' {
			return 0, fastBail
		}
		if i, st = skipSpace(b, i+1, oneLine, nil); st != fastOK {
			return 0, st
		}
		if bit == fPayload {
			end, st = scanValue(b[i:], oneLine, &f.payloadSpace)
			f.payload, end = b[i:i+end], i+end
		} else {
			var s []byte
			s, end, st = plainString(b, i)
			f.set(bit, s)
		}
		if st != fastOK {
			return 0, st
		}
		if i, st = skipSpace(b, end, oneLine, nil); st != fastOK {
			return 0, st
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return i + 1, fastOK
		default:
			return 0, fastBail
		}
	}
}

func (f *fields) set(bit uint8, s []byte) {
	switch bit {
	case fID:
		f.id = s
	case fKey:
		f.key = s
	case fKeyBase64:
		f.keyB64 = s
	case fTime:
		f.tm = s
	case fPayloadBase64:
		f.payB64 = s
	}
}

// fieldName matches the field name at b[i] ('"') exactly; any other name
// (another case, an escape, an unknown field) bails.
func fieldName(b []byte, i int) (uint8, int, fastStatus) {
	j := i + 1
	for j < len(b) && b[j] != '"' && b[j] != '\\' && j-i < 16 {
		j++
	}
	if j >= len(b) {
		return 0, 0, fastMore
	}
	if b[j] != '"' {
		return 0, 0, fastBail
	}
	var bit uint8
	switch string(b[i+1 : j]) {
	case "id":
		bit = fID
	case "key":
		bit = fKey
	case "key_base64":
		bit = fKeyBase64
	case "time":
		bit = fTime
	case "payload":
		bit = fPayload
	case "payload_base64":
		bit = fPayloadBase64
	default:
		return 0, 0, fastBail
	}
	return bit, j + 1, fastOK
}

// plainString returns the contents of the string at b[i], which must be
// one without escapes or control characters (others bail: null too).
func plainString(b []byte, i int) ([]byte, int, fastStatus) {
	if b[i] != '"' {
		return nil, 0, fastBail
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, fastOK
		case c == '\\' || c < 0x20:
			return nil, 0, fastBail
		}
	}
	return nil, 0, fastMore
}

// skipSpace skips JSON whitespace from b[i], adding what it skips to
// *space; it bails at a newline if oneLine, and asks for more at the end.
func skipSpace(b []byte, i int, oneLine bool, space *int) (int, fastStatus) {
	j := i
	for ; j < len(b); j++ {
		switch b[j] {
		case ' ', '\t', '\r':
			continue
		case '\n':
			if oneLine {
				return 0, fastBail
			}
			continue
		}
		if space != nil {
			*space += j - i
		}
		return j, fastOK
	}
	return 0, fastMore
}

// fastEntry checks the fields as wireEvent.entry and Event.Entry do and
// builds the entry, copying its bytes into the decoder's arena (rest is
// how many bytes of the window follow the event, a hint for its size).
// Any problem returns false, for the slow path to report.
func (d *decoder) fastEntry(f *fields, rest int) (ledger.Entry, bool) {
	var e ledger.Entry
	if f.seen&fID != 0 {
		if len(f.id) == 0 || len(f.id) > merkle.MaxID || !utf8.Valid(f.id) {
			return e, false
		}
		e.ID = d.idString(f.id, rest)
	}
	switch {
	case f.seen&fKey != 0 && f.seen&fKeyBase64 != 0:
		return e, false
	case f.seen&fKey != 0:
		if len(f.key) > merkle.MaxKey || !utf8.Valid(f.key) {
			return e, false
		}
		e.HasKey, e.Key = true, append(d.alloc(len(f.key), rest)[:0], f.key...)
	case f.seen&fKeyBase64 != 0:
		k, ok := d.base64(f.keyB64, rest)
		if !ok || len(k) > merkle.MaxKey {
			return e, false
		}
		e.HasKey, e.Key = true, k
	}
	if f.seen&fTime != 0 {
		t, err := time.Parse(time.RFC3339Nano, string(f.tm))
		if err != nil || t.IsZero() || t.Year() < 1678 || t.Year() > 2261 {
			return e, false
		}
		e.Time = t
	}
	switch {
	case f.seen&fPayload != 0 && f.seen&fPayloadBase64 != 0:
		return e, false
	case f.seen&fPayload != 0:
		e.Payload, e.PayloadJSON = d.compact(f.payload, f.payloadSpace, rest), true
	case f.seen&fPayloadBase64 != 0:
		p, ok := d.base64(f.payB64, rest)
		if !ok {
			return e, false
		}
		e.Payload = p
	default:
		return e, false
	}
	if d.lim.MaxPayload > 0 && len(e.Payload) > d.lim.MaxPayload {
		return e, false
	}
	return e, true
}

// base64 decodes s as base64.StdEncoding.DecodeString does.
func (d *decoder) base64(s []byte, rest int) ([]byte, bool) {
	dst := d.alloc(base64.StdEncoding.DecodedLen(len(s)), rest)
	n, err := base64.StdEncoding.Decode(dst, s)
	if err != nil {
		return nil, false
	}
	return dst[:n:n], true
}

// compact copies the valid JSON value v without its space bytes of
// insignificant whitespace, as json.Compact writes it.
func (d *decoder) compact(v []byte, space, rest int) []byte {
	dst := d.alloc(len(v)-space, rest)
	if space == 0 {
		copy(dst, v)
		return dst
	}
	return appendCompact(dst[:0], v)
}

// appendCompact appends v, a valid JSON value, without its insignificant
// whitespace.
func appendCompact(out, v []byte) []byte {
	inString, escaped := false, false
	for _, c := range v {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		out = append(out, c)
	}
	return out
}

// idString returns id as a string, its bytes copied into the arena the
// decoder keeps for ids: one allocation for many of them. The arena's
// bytes are written once and never again, so they can back strings.
func (d *decoder) idString(id []byte, rest int) string {
	if len(id) > cap(d.ids)-len(d.ids) {
		d.ids = make([]byte, 0, max(len(id), min(rest/4, 16<<10)))
	}
	n := len(d.ids)
	d.ids = append(d.ids, id...)
	return unsafe.String(&d.ids[n], len(id))
}

// alloc returns n bytes (len and cap n) of the arena that the entries'
// keys and payloads share: one allocation for many events. A new chunk
// is sized by how much of the body is left in the window.
func (d *decoder) alloc(n, rest int) []byte {
	if n == 0 {
		return []byte{} // not nil: an empty key or payload is there
	}
	if n > cap(d.arena)-len(d.arena) {
		d.arena = make([]byte, 0, max(n, min(rest, largeWindow)))
	}
	s := d.arena[len(d.arena) : len(d.arena)+n : len(d.arena)+n]
	d.arena = d.arena[:len(d.arena)+n]
	return s
}

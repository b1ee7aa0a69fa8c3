package ingest

import (
	"encoding/base64"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/auditd/auditd/internal/jsonscan"
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
	d.sc.OneLine = oneLine
	n, st := f.scan(&d.sc, b)
	if st != fastOK {
		return ledger.Entry{}, 0, st
	}
	e, ok := d.fastEntry(&f, len(b)-n)
	if !ok {
		return ledger.Entry{}, 0, fastBail
	}
	return e, n, fastOK
}

// status turns a scan's status into the fast path's: a value cut off at
// the end of the bytes read asks for more, any mistake bails.
func status(st jsonscan.Status) fastStatus {
	switch {
	case st == jsonscan.OK:
		return fastOK
	case st.Truncated():
		return fastMore
	}
	return fastBail
}

// scan reads the object's fields into f. The event object is one level
// of nesting: its payload may nest one level less than encoding/json's
// limit.
func (f *fields) scan(sc *jsonscan.Scanner, b []byte) (int, fastStatus) {
	i, empty, st := sc.Open(b, 0)
	if st != jsonscan.OK || empty {
		return 0, status(st) // an empty object is an error: the slow path words it
	}
	end, v, fl, st := sc.Key(b, i)
	for {
		if st != jsonscan.OK {
			return 0, status(st)
		}
		if fl != 0 {
			return 0, fastBail // an escape or a byte past ASCII: no field's name
		}
		bit := fieldBit(b[i+1 : end-1])
		if bit == 0 || f.seen&bit != 0 {
			return 0, fastBail // unknown, or a duplicate (the last one wins, the slow way)
		}
		f.seen |= bit
		if v >= len(b) {
			return 0, fastMore
		}
		if bit == fPayload {
			sc.Space = 0
			if end, st = sc.Value(b, v, 1); st != jsonscan.OK {
				return 0, status(st)
			}
			f.payload, f.payloadSpace = b[v:end], sc.Space
		} else {
			if b[v] != '"' {
				return 0, fastBail // null, or not a string
			}
			if end, fl, st = jsonscan.String(b, v); st != jsonscan.OK {
				return 0, status(st)
			}
			if fl&jsonscan.Escaped != 0 {
				return 0, fastBail
			}
			f.set(bit, b[v+1:end-1])
		}
		var more bool
		if i, end, v, fl, more, st = sc.NextKey(b, end); !more && st == jsonscan.OK {
			return end, fastOK
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

// fieldBit returns the bit of the field named name exactly (0 for any
// other name: another case, an unknown field).
func fieldBit(name []byte) uint8 {
	switch string(name) {
	case "id":
		return fID
	case "key":
		return fKey
	case "key_base64":
		return fKeyBase64
	case "time":
		return fTime
	case "payload":
		return fPayload
	case "payload_base64":
		return fPayloadBase64
	}
	return 0
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

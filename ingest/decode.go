// Package ingest turns event sources into ledger entries: request bodies (a
// JSON array or NDJSON, Decode) and Kafka topic partitions, consumed
// exactly once, one ledger log per partition, with the partition's position
// committed in the same batch as its entries (Kafka, Position).
package ingest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/auditd/auditd/internal/jsonscan"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Event is the JSON form of an event a producer posts:
//
//	{"id": "...", "key": "...", "time": "RFC 3339", "payload": <any JSON>}
//
// key_base64 and payload_base64 carry bytes instead. Every field but the
// payload is optional.
type Event struct {
	ID            string          `json:"id,omitempty"`
	Key           *string         `json:"key,omitempty"`
	KeyBase64     *string         `json:"key_base64,omitempty"`
	Time          *string         `json:"time,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
}

// DecodeError locates a malformed event in a body.
type DecodeError struct {
	Line int // 1-based line of the body where the problem is
	Item int // 0-based position of the event, -1 if not known
	Err  string
	// Exceeds names the limit the body goes over ("payload" or "events"),
	// "" when it is malformed; Limit is that limit. A body over a limit is
	// well formed but larger than the server takes (HTTP 413, not 400).
	Exceeds string
	Limit   int
}

func (e *DecodeError) Error() string {
	if e.Item >= 0 {
		return fmt.Sprintf("line %d (event %d): %s", e.Line, e.Item, e.Err)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Err)
}

// ErrEmpty reports a body that holds no event.
var ErrEmpty = errors.New("no events in body")

// Limits bounds what a body may hold.
type Limits struct {
	MaxEvents  int // events per body (0: no limit)
	MaxPayload int // payload bytes per event (0: no limit)
}

// Decode reads a batch of events: either one JSON array of event objects, or
// NDJSON (one object per line; blank lines are skipped). It returns the
// entries in order, or a *DecodeError naming the line of the first problem.
// An error from r comes back as it is.
//
// Events of the usual shape are decoded in one pass (decode_fast.go);
// any other is decoded by encoding/json, as it always was, which also
// words every error. The entries' keys and payloads share a few
// allocations; r is read through a pooled buffer.
func Decode(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	d := decoders.Get().(*decoder)
	d.win.reset(r)
	d.w, d.lim = &d.win, lim
	defer d.done()
	w := d.w
	first, err := w.skipSpace(0)
	if err == io.EOF {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, err
	}
	var out []ledger.Entry
	if w.from(first)[0] == '[' {
		out, err = d.array(first)
	} else {
		out, err = d.ndjson(first)
	}
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrEmpty
	}
	// The entries were gathered in the decoder's reused slice: one
	// allocation of the right size, not a slice grown by doubling.
	return append([]ledger.Entry(nil), out...), nil
}

// decoder decodes one body. Decoders are pooled, with their window's
// buffer: nothing Decode returns points into either.
type decoder struct {
	w     *window // &win
	win   window
	lim   Limits
	out   []ledger.Entry // the entries so far, reused from body to body
	sc    jsonscan.Scanner
	arena []byte // where entries' keys and payloads are copied (decode_fast.go)
	ids   []byte // where their ids are (idString)
}

// maxPooledEntries bounds the entries slice a pooled decoder keeps.
const maxPooledEntries = 1024

var decoders = sync.Pool{New: func() any { return new(decoder) }}

func (d *decoder) done() {
	d.win.release()
	d.win = window{}
	d.arena, d.ids = nil, nil
	clear(d.out) // the pool keeps no payload alive
	d.out = d.out[:0]
	if cap(d.out) > maxPooledEntries {
		d.out = nil
	}
	decoders.Put(d)
}

// readErr returns the reader's error if err is it (not io.EOF).
func (d *decoder) readErr(err error) error {
	if d.w.err != nil && d.w.err != io.EOF && errors.Is(err, d.w.err) {
		return d.w.err
	}
	return nil
}

// ndjson decodes one event object per line, from offset off, checking that
// each event starts on a line of its own and ends on the line it started on.
func (d *decoder) ndjson(off int64) ([]ledger.Entry, error) {
	w := d.w
	out := d.out[:0]
	defer func() { d.out = out }()
	prevEnd := 0 // the line the previous event ended on
	for i := 0; ; i++ {
		w.keep = off
		start, err := w.skipSpace(off)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		w.keep = start
		line := w.lineAt(start)
		if c := w.from(start)[0]; c == ']' || c == '}' {
			return nil, &DecodeError{Line: line, Item: i, Err: "unexpected data: want one JSON object per line"}
		}
		if line == prevEnd {
			return nil, &DecodeError{Line: line, Item: i - 1, Err: "more than one JSON value on the line"}
		}
		if d.lim.MaxEvents > 0 && i >= d.lim.MaxEvents {
			return nil, &DecodeError{Line: line, Item: i, Err: fmt.Sprintf("more than %d events in one request", d.lim.MaxEvents), Exceeds: "events", Limit: d.lim.MaxEvents}
		}
		e, end, ok := d.fast(start, true)
		if !ok {
			if e, end, err = d.slowLine(start, line, i); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
		off, prevEnd = end, w.lineAt(end)
	}
}

// fast decodes the event at offset v by the fast path, reading more of
// the body as it needs; false leaves it to the slow path.
func (d *decoder) fast(v int64, oneLine bool) (ledger.Entry, int64, bool) {
	for {
		b := d.w.from(v)
		if b[0] != '{' {
			return ledger.Entry{}, 0, false
		}
		e, n, st := d.fastEvent(b, oneLine)
		switch st {
		case fastOK:
			return e, v + int64(n), true
		case fastMore:
			// Try again once the bytes from v on have doubled (or the
			// body ends): a body that comes a byte at a time costs
			// linear time, not quadratic.
			grew := false
			for len(d.w.from(v)) < 2*len(b) {
				if ok, _ := d.w.fill(); !ok {
					break
				}
				grew = true
			}
			if grew {
				continue
			}
		}
		return ledger.Entry{}, 0, false
	}
}

// slowLine decodes the NDJSON event at offset start, on line line, with
// encoding/json.
func (d *decoder) slowLine(start int64, line, i int) (ledger.Entry, int64, error) {
	dec := json.NewDecoder(&windowReader{w: d.w, off: start})
	dec.DisallowUnknownFields()
	var ev wireEvent
	if err := dec.Decode(&ev); err != nil {
		if rerr := d.readErr(err); rerr != nil {
			return ledger.Entry{}, 0, rerr // the body could not be read (too large, cut off)
		}
		return ledger.Entry{}, 0, &DecodeError{Line: line, Item: i, Err: cleanJSONError(err)}
	}
	end := start + dec.InputOffset()
	if d.w.lineAt(end) != line {
		return ledger.Entry{}, 0, &DecodeError{Line: line, Item: i, Err: "an event must be on one line"}
	}
	e, err := ev.entry(d.lim)
	if err != nil {
		return ledger.Entry{}, 0, exceeds(&DecodeError{Line: line, Item: i, Err: err.Error()}, err)
	}
	return e, end, nil
}

func cleanJSONError(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of JSON"
	}
	return err.Error()
}

// Entry validates the event and converts it to a ledger entry. JSON payloads
// are stored compacted (insignificant whitespace removed).
func (ev *Event) Entry(lim Limits) (ledger.Entry, error) {
	var e ledger.Entry
	if len(ev.ID) > merkle.MaxID {
		return e, fmt.Errorf("id of %d bytes (max %d)", len(ev.ID), merkle.MaxID)
	}
	if !utf8.ValidString(ev.ID) {
		return e, errors.New("id is not UTF-8")
	}
	e.ID = ev.ID
	switch {
	case ev.Key != nil && ev.KeyBase64 != nil:
		return e, errors.New("both key and key_base64 given")
	case ev.Key != nil:
		e.HasKey, e.Key = true, []byte(*ev.Key)
	case ev.KeyBase64 != nil:
		k, err := base64.StdEncoding.DecodeString(*ev.KeyBase64)
		if err != nil {
			return e, fmt.Errorf("key_base64: %v", err)
		}
		e.HasKey, e.Key = true, k
	}
	if len(e.Key) > merkle.MaxKey {
		return e, fmt.Errorf("key of %d bytes (max %d)", len(e.Key), merkle.MaxKey)
	}
	if ev.Time != nil {
		t, err := time.Parse(time.RFC3339Nano, *ev.Time)
		if err != nil {
			return e, fmt.Errorf("time %q is not RFC 3339", *ev.Time)
		}
		if t.IsZero() || t.Year() < 1678 || t.Year() > 2261 {
			return e, fmt.Errorf("time %q is outside the range of Unix nanoseconds", *ev.Time)
		}
		e.Time = t
	}
	switch {
	case ev.Payload != nil && ev.PayloadBase64 != nil:
		return e, errors.New("both payload and payload_base64 given")
	case ev.Payload != nil:
		if !json.Valid(ev.Payload) {
			var buf bytes.Buffer
			return e, fmt.Errorf("payload: %v", json.Compact(&buf, ev.Payload))
		}
		// Compacted in place: the decoder's copy is the only one.
		e.Payload, e.PayloadJSON = compactValid(ev.Payload), true
	case ev.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*ev.PayloadBase64)
		if err != nil {
			return e, fmt.Errorf("payload_base64: %v", err)
		}
		e.Payload = p
	default:
		return e, errors.New("payload or payload_base64 is required")
	}
	if lim.MaxPayload > 0 && len(e.Payload) > lim.MaxPayload {
		return e, &limitError{"payload", lim.MaxPayload, fmt.Sprintf("payload of %d bytes (max %d)", len(e.Payload), lim.MaxPayload)}
	}
	return e, nil
}

// limitError is an event over one of the Limits.
type limitError struct {
	what  string
	limit int
	msg   string
}

func (e *limitError) Error() string { return e.msg }

// exceeds marks de with the limit err reports, if it is a *limitError.
func exceeds(de *DecodeError, err error) *DecodeError {
	var le *limitError
	if errors.As(err, &le) {
		de.Exceeds, de.Limit = le.what, le.limit
	}
	return de
}

// compactValid removes the insignificant whitespace of b, a valid JSON
// value, in place (as json.Compact would, without a second buffer).
func compactValid(b []byte) []byte { return appendCompact(b[:0], b) }

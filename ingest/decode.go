// Package ingest turns event sources into ledger entries: request bodies (a
// JSON array or NDJSON, Decode) and Kafka topic partitions, consumed
// exactly once, one ledger log per partition, with the partition's position
// committed in the same batch as its entries (Kafka, Position).
package ingest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

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
func Decode(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	first, skipped, err := peekNonSpace(br)
	if err == io.EOF {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, err
	}
	var out []ledger.Entry
	if first == '[' {
		out, err = decodeArray(br, lim)
	} else {
		out, err = decodeNDJSON(br, lim)
	}
	var de *DecodeError
	if errors.As(err, &de) {
		de.Line += skipped // lines of leading whitespace
	}
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrEmpty
	}
	return out, nil
}

// peekNonSpace skips leading whitespace and returns the first other byte
// and how many newlines it skipped.
func peekNonSpace(br *bufio.Reader) (byte, int, error) {
	lines := 0
	for {
		b, err := br.Peek(1)
		if err != nil {
			return 0, lines, err
		}
		switch b[0] {
		case '\n':
			lines++
			fallthrough
		case ' ', '\t', '\r':
			br.ReadByte()
			continue
		}
		return b[0], lines, nil
	}
}

// lineCounter counts the newlines of everything read through it, so decode
// errors can name a line. It keeps only the bytes from the current event on
// (drop forgets those before it), not a copy of the whole body.
type lineCounter struct {
	r   io.Reader
	buf []byte // buf[head:] holds the bytes from offset base on
	err error  // the reader's last error other than EOF
	// head is where offset base sits in buf; lines counts the newlines
	// before base.
	head  int
	base  int64
	lines int
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.buf = append(c.buf, p[:n]...)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// window returns the bytes kept from offset off (clamped to what is kept).
func (c *lineCounter) window(off int64) []byte {
	live := c.buf[c.head:]
	i := min(max(off-c.base, 0), int64(len(live)))
	return live[i:]
}

// bytes returns the bytes kept in [from, to).
func (c *lineCounter) bytes(from, to int64) []byte {
	w := c.window(from)
	return w[:min(max(to-max(from, c.base), 0), int64(len(w)))]
}

// lineAt returns the 1-based line of byte offset off (at or after the
// last drop).
func (c *lineCounter) lineAt(off int64) int {
	return 1 + c.lines + bytes.Count(c.bytes(c.base, off), []byte{'\n'})
}

// drop forgets the bytes before off, counting their newlines. The buffer
// is compacted once most of it is dropped, so dropping costs O(1) per byte.
func (c *lineCounter) drop(off int64) {
	if off <= c.base {
		return
	}
	gone := c.bytes(c.base, off)
	c.lines += bytes.Count(gone, []byte{'\n'})
	c.head += len(gone)
	c.base += int64(len(gone))
	if c.head > len(c.buf)/2 {
		n := copy(c.buf, c.buf[c.head:])
		c.buf, c.head = c.buf[:n], 0
	}
}

// leadingNewlines counts the newlines between off and the next token.
func (c *lineCounter) leadingNewlines(off int64) int {
	n := 0
	for _, b := range c.window(off) {
		switch b {
		case '\n':
			n++
		case ' ', '\t', '\r', ',':
		default:
			return n
		}
	}
	return n
}

func decodeArray(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	lc := &lineCounter{r: r}
	dec := json.NewDecoder(lc)
	dec.DisallowUnknownFields()
	var start int64 // offset where the current event's value begins
	fail := func(item int, err error) error {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		off := dec.InputOffset()
		if lc.err != nil && errors.Is(err, lc.err) {
			return err // the body could not be read (too large, cut off)
		}
		var fe *fieldError
		switch {
		case errors.As(err, &fe):
			off = start + fieldOffset(lc.bytes(start, off), fe.field)
		case errors.As(err, &se):
			off = se.Offset // from the start of the stream
		case errors.As(err, &te):
			off = start + te.Offset // from the start of the value
		}
		return &DecodeError{Line: lc.lineAt(off), Item: item, Err: cleanJSONError(err)}
	}
	if _, err := dec.Token(); err != nil { // '['
		return nil, fail(-1, err)
	}
	var out []ledger.Entry
	for i := 0; dec.More(); i++ {
		if lim.MaxEvents > 0 && i >= lim.MaxEvents {
			off := dec.InputOffset()
			return nil, &DecodeError{Line: lc.lineAt(off) + lc.leadingNewlines(off), Item: i, Err: fmt.Sprintf("more than %d events in one request", lim.MaxEvents), Exceeds: "events", Limit: lim.MaxEvents}
		}
		start = dec.InputOffset()
		lc.drop(start)
		var ev wireEvent
		if err := dec.Decode(&ev); err != nil {
			return nil, fail(i, err)
		}
		e, err := ev.entry(lim)
		if err != nil {
			return nil, exceeds(&DecodeError{Line: lc.lineAt(start) + lc.leadingNewlines(start), Item: i, Err: err.Error()}, err)
		}
		out = append(out, e)
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, fail(-1, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &DecodeError{Line: lc.lineAt(dec.InputOffset()), Item: -1, Err: "unexpected data after the JSON array"}
	}
	return out, nil
}

// decodeNDJSON reads one event object per line through a single streaming
// decoder (no per-line decoder or copy), checking that each event starts on
// a line of its own and ends on the line it started on.
func decodeNDJSON(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	lc := &lineCounter{r: r}
	dec := json.NewDecoder(lc)
	dec.DisallowUnknownFields()
	var out []ledger.Entry
	prevEnd := 0 // the line the previous event ended on
	for i := 0; ; i++ {
		more := dec.More() // skips whitespace and blank lines
		if lc.err != nil {
			return nil, lc.err // the body could not be read (too large, cut off)
		}
		start := dec.InputOffset()
		line := lc.lineAt(start)
		if !more {
			if _, err := dec.Token(); err == io.EOF {
				return out, nil
			}
			return nil, &DecodeError{Line: line, Item: i, Err: "unexpected data: want one JSON object per line"}
		}
		lc.drop(start)
		if line == prevEnd {
			return nil, &DecodeError{Line: line, Item: i - 1, Err: "more than one JSON value on the line"}
		}
		if lim.MaxEvents > 0 && i >= lim.MaxEvents {
			return nil, &DecodeError{Line: line, Item: i, Err: fmt.Sprintf("more than %d events in one request", lim.MaxEvents), Exceeds: "events", Limit: lim.MaxEvents}
		}
		var ev wireEvent
		if err := dec.Decode(&ev); err != nil {
			if lc.err != nil && errors.Is(err, lc.err) {
				return nil, err
			}
			return nil, &DecodeError{Line: line, Item: i, Err: cleanJSONError(err)}
		}
		end := lc.lineAt(dec.InputOffset())
		if end != line {
			return nil, &DecodeError{Line: line, Item: i, Err: "an event must be on one line"}
		}
		e, err := ev.entry(lim)
		if err != nil {
			return nil, exceeds(&DecodeError{Line: line, Item: i, Err: err.Error()}, err)
		}
		out = append(out, e)
		prevEnd = end
	}
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
func compactValid(b []byte) []byte {
	out := b[:0]
	inString, escaped := false, false
	for _, c := range b {
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

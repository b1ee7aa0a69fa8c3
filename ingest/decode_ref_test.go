package ingest

// The oracle of the differential fuzz test (FuzzDecodeDiff): Decode as it
// was before the hand-written scanner (commit 0fff9cc), encoding/json's
// streaming Decoder into a wireEvent, with one fix: the line of a syntax
// error inside an array element (refSyntaxOffset). wireEvent.entry,
// Event.Entry and fieldOffset are shared with Decode, which calls them for
// every event its fast path does not take.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/auditd/auditd/ledger"
)

// Decode reads a batch of events: either one JSON array of event objects, or
// NDJSON (one object per line; blank lines are skipped). It returns the
// entries in order, or a *DecodeError naming the line of the first problem.
func refDecode(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	first, skipped, err := refPeekNonSpace(br)
	if err == io.EOF {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, err
	}
	var out []ledger.Entry
	if first == '[' {
		out, err = refDecodeArray(br, lim)
	} else {
		out, err = refDecodeNDJSON(br, lim)
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

// refPeekNonSpace skips leading whitespace and returns the first other byte
// and how many newlines it skipped.
func refPeekNonSpace(br *bufio.Reader) (byte, int, error) {
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

// refLineCounter counts the newlines of everything read through it, so decode
// errors can name a line. It keeps only the bytes from the current event on
// (drop forgets those before it), not a copy of the whole body.
type refLineCounter struct {
	r   io.Reader
	buf []byte // buf[head:] holds the bytes from offset base on
	err error  // the reader's last error other than EOF
	// head is where offset base sits in buf; lines counts the newlines
	// before base.
	head  int
	base  int64
	lines int
}

func (c *refLineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.buf = append(c.buf, p[:n]...)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// window returns the bytes kept from offset off (clamped to what is kept).
func (c *refLineCounter) window(off int64) []byte {
	live := c.buf[c.head:]
	i := min(max(off-c.base, 0), int64(len(live)))
	return live[i:]
}

// bytes returns the bytes kept in [from, to).
func (c *refLineCounter) bytes(from, to int64) []byte {
	w := c.window(from)
	return w[:min(max(to-max(from, c.base), 0), int64(len(w)))]
}

// lineAt returns the 1-based line of byte offset off (at or after the
// last drop).
func (c *refLineCounter) lineAt(off int64) int {
	return 1 + c.lines + bytes.Count(c.bytes(c.base, off), []byte{'\n'})
}

// drop forgets the bytes before off, counting their newlines. The buffer
// is compacted once most of it is dropped, so dropping costs O(1) per byte.
func (c *refLineCounter) drop(off int64) {
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
func (c *refLineCounter) leadingNewlines(off int64) int {
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

func refDecodeArray(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	lc := &refLineCounter{r: r}
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
		case errors.As(err, &se) && item >= 0 && se.Error() != "expected comma after array element":
			// Fixed here and in Decode: the scanner's offset counts only
			// the bytes it scanned itself, not the '[', the commas and
			// the space that Token and More skipped, so it named an
			// earlier line ("[\n\n\n{oops}]" was line 2). Rescan the
			// value from its comma.
			off = refSyntaxOffset(lc.window(start), start, item, se)
		case errors.As(err, &se):
			off = se.Offset
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

// refDecodeNDJSON reads one event object per line through a single streaming
// decoder (no per-line decoder or copy), checking that each event starts on
// a line of its own and ends on the line it started on.
func refDecodeNDJSON(r io.Reader, lim Limits) ([]ledger.Entry, error) {
	lc := &refLineCounter{r: r}
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

// refSyntaxOffset returns the stream offset of the syntax error se in the
// array element item whose bytes (from its comma on, the first has none)
// are w, at offset start.
func refSyntaxOffset(w []byte, start int64, item int, se *json.SyntaxError) int64 {
	k := 0
	for k < len(w) && (w[k] == ' ' || w[k] == '\t' || w[k] == '\r' || w[k] == '\n') {
		k++
	}
	if item > 0 && k < len(w) && w[k] == ',' {
		k++
	} else {
		k = 0
	}
	var raw json.RawMessage
	var se2 *json.SyntaxError
	if err := json.NewDecoder(bytes.NewReader(w[k:])).Decode(&raw); errors.As(err, &se2) {
		return start + int64(k) + se2.Offset
	}
	return se.Offset
}

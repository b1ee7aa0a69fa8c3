package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/auditd/auditd/internal/jsonscan"
	"github.com/auditd/auditd/ledger"
)

// array decodes the JSON array whose '[' is at offset open. Errors name
// the lines encoding/json's Token API named before (decode_ref_test.go
// keeps that decoder as the oracle), but for a syntax error inside an
// element, which names its own line now.
func (d *decoder) array(open int64) ([]ledger.Entry, error) {
	w := d.w
	out := d.out[:0]
	defer func() { d.out = out }()
	prev := open + 1 // after the '[' or the previous element
	for i := 0; ; i++ {
		w.keep = prev
		p, err := w.skipSpace(prev)
		if err == io.EOF {
			return nil, &DecodeError{Line: w.lineAt(prev), Item: -1, Err: "unexpected end of JSON"}
		}
		if err != nil {
			return nil, err
		}
		switch w.from(p)[0] {
		case ']':
			return out, d.arrayEnd(p + 1)
		case '}':
			ctx := "after array element"
			if i == 0 {
				ctx = "looking for beginning of value"
			}
			return nil, &DecodeError{Line: w.lineAt(p), Item: -1, Err: "invalid character '}' " + ctx}
		}
		if d.lim.MaxEvents > 0 && i >= d.lim.MaxEvents {
			return nil, &DecodeError{Line: w.lineAt(d.nextToken(p)), Item: i, Err: fmt.Sprintf("more than %d events in one request", d.lim.MaxEvents), Exceeds: "events", Limit: d.lim.MaxEvents}
		}
		k := p // where the element's value (and any space before it) starts
		if i > 0 {
			if w.from(p)[0] != ',' {
				return nil, &DecodeError{Line: w.lineAt(p), Item: i, Err: "expected comma after array element"}
			}
			k = p + 1
		}
		v, err := w.skipSpace(k)
		e, end, ok := ledger.Entry{}, int64(0), false
		if err == nil {
			e, end, ok = d.fast(v, false)
		}
		if !ok {
			if e, end, err = d.slowElement(p, k, i); err != nil {
				return nil, err
			}
		}
		out = append(out, e)
		prev = end
	}
}

// arrayEnd checks that only space follows the array's ']', at offset off.
// A read error there comes back as it is (before, it was reported as
// unexpected data after the array).
func (d *decoder) arrayEnd(off int64) error {
	d.w.keep = off
	q, err := d.w.skipSpace(off)
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	}
	return &DecodeError{Line: d.w.lineAt(q), Item: -1, Err: "unexpected data after the JSON array"}
}

// nextToken returns the offset of the first byte from off on that is
// neither space nor a comma (or the end of the body).
func (d *decoder) nextToken(off int64) int64 {
	for {
		b := d.w.from(off)
		for i, c := range b {
			if !jsonscan.IsSpace(c) && c != ',' {
				return off + int64(i)
			}
		}
		off += int64(len(b))
		if ok, _ := d.w.fill(); !ok {
			return off
		}
	}
}

// slowElement decodes array element i with encoding/json: p is the offset
// of its comma (or of the element, the first has none), k where its value
// and the space before it start.
func (d *decoder) slowElement(p, k int64, i int) (ledger.Entry, int64, error) {
	w := d.w
	dec := json.NewDecoder(&windowReader{w: w, off: k})
	dec.DisallowUnknownFields()
	var ev wireEvent
	if err := dec.Decode(&ev); err != nil {
		if rerr := d.readErr(err); rerr != nil {
			return ledger.Entry{}, 0, rerr // the body could not be read (too large, cut off)
		}
		off := k + dec.InputOffset() // the end of the value, or k if it is malformed
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		var fe *fieldError
		switch {
		case errors.As(err, &fe):
			off = p + fieldOffset(w.from(p)[:off-p], fe.field)
		case errors.As(err, &se):
			off = k + se.Offset
		case errors.As(err, &te):
			off = p + te.Offset // as before: te.Offset is from k
		}
		return ledger.Entry{}, 0, &DecodeError{Line: w.lineAt(off), Item: i, Err: cleanJSONError(err)}
	}
	end := k + dec.InputOffset()
	e, err := ev.entry(d.lim)
	if err != nil {
		return ledger.Entry{}, 0, exceeds(&DecodeError{Line: w.lineAt(d.nextToken(p)), Item: i, Err: err.Error()}, err)
	}
	return e, end, nil
}

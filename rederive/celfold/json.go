package celfold

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/auditd/auditd/internal/jsonscan"
)

// celJSONDecoder decodes JSON straight into CEL values, a builder on
// jsonscan (which has the grammar, the nesting limit and the string
// escapes). A number whose text is an integer (no fraction, no exponent)
// within int64 becomes an int; every other number a double. Objects
// become maps with string keys, arrays lists.
type celJSONDecoder struct {
	s       string
	b       []byte // s's bytes, read only
	i       int
	depth   int
	sc      jsonscan.Scanner
	jfields []celJSONField // objects being indexed, innermost last
	elems   []ref.Val      // arrays under construction, innermost last
}

var celJSONDecoders = sync.Pool{New: func() any { return new(celJSONDecoder) }}

// reset readies d to read s from offset i.
func (d *celJSONDecoder) reset(s string, i int) {
	d.s, d.i, d.depth = s, i, 0
	d.b = unsafe.Slice(unsafe.StringData(s), len(s))
}

// decodeEventJSON decodes one JSON value. The result shares no memory with b.
func decodeEventJSON(b []byte) (ref.Val, error) {
	d := celJSONDecoders.Get().(*celJSONDecoder)
	d.reset(string(b), 0)
	v, err := d.value()
	if err == nil {
		if end, st := jsonscan.End(d.b, d.i); st != jsonscan.OK {
			v, err = nil, d.fail(end, st)
		}
	}
	d.release()
	return v, err
}

// release returns d to the pool. Its scratch stacks keep references to
// the last event's values until overwritten; the pool drops idle decoders
// at garbage collection, and large stacks are not kept.
func (d *celJSONDecoder) release() {
	d.s, d.b = "", nil
	d.jfields, d.elems = d.jfields[:0], d.elems[:0]
	if cap(d.jfields) > 1024 || cap(d.elems) > 1024 {
		d.jfields, d.elems = nil, nil
	}
	celJSONDecoders.Put(d)
}

// fail is the error of a scan that stopped at offset off with st.
func (d *celJSONDecoder) fail(off int, st jsonscan.Status) error {
	d.i = off
	return jsonscan.Err(d.b, off, st)
}

func (d *celJSONDecoder) value() (ref.Val, error) {
	d.i = jsonscan.SkipSpace(d.b, d.i)
	end, k, fl, st := jsonscan.Scalar(d.b, d.i)
	if st != jsonscan.OK {
		return nil, d.fail(end, st)
	}
	switch k {
	case jsonscan.KindObject:
		return d.index()
	case jsonscan.KindArray:
		return d.array()
	case jsonscan.KindString:
		s := d.str(d.i, end, fl)
		d.i = end
		return types.String(s), nil
	case jsonscan.KindTrue:
		d.i = end
		return types.True, nil
	case jsonscan.KindFalse:
		d.i = end
		return types.False, nil
	case jsonscan.KindNull:
		d.i = end
		return types.NullValue, nil
	}
	kind, bits, err := d.number(end, fl)
	if err != nil {
		return nil, err
	}
	if kind == jsonInt {
		return types.Int(int64(bits)), nil
	}
	return types.Double(math.Float64frombits(bits)), nil
}

// Kinds of JSON values, as indexed.
const (
	jsonNull      uint8 = iota
	jsonFalse           //
	jsonTrue            //
	jsonInt             // bits: the int64
	jsonDouble          // bits: the float64
	jsonString          // no escapes, valid UTF-8: the text between the quotes
	jsonStringEsc       // decoded on access
	jsonObject          // indexed on access
	jsonArray           // decoded on access
)

// index indexes the object at d.i (an opening brace), validating it.
func (d *celJSONDecoder) index() (ref.Val, error) {
	if d.depth++; d.depth > jsonscan.MaxDepth {
		return nil, d.fail(d.i+1, jsonscan.TooDeep)
	}
	j, empty, st := d.sc.Open(d.b, d.i)
	if st != jsonscan.OK {
		return nil, d.fail(j, st)
	}
	if empty {
		d.i = j
		d.depth--
		return &celJSONObject{src: d.s}, nil
	}
	start := len(d.jfields)
	key := j
	kEnd, v, fl, st := d.sc.Key(d.b, key)
	for {
		if st != jsonscan.OK {
			return nil, d.fail(kEnd, st)
		}
		f := celJSONField{name: d.str(key, kEnd, fl), start: v}
		d.i = v
		var err error
		if f.kind, f.bits, err = d.skip(); err != nil {
			return nil, err
		}
		f.end = d.i
		switch f.kind {
		case jsonStringEsc, jsonObject, jsonArray:
			f.once = new(celJSONOnce)
		}
		d.jfields = append(d.jfields, f)
		var more bool
		if key, kEnd, v, fl, more, st = d.sc.NextKey(d.b, d.i); !more && st == jsonscan.OK {
			d.i = kEnd
			break
		}
	}
	o := allocCELJSONObject(d.s, len(d.jfields)-start)
	o.fields = append(o.fields, d.jfields[start:]...)
	d.jfields = d.jfields[:start]
	d.depth--
	return o, nil
}

// skip validates the value at d.i and moves past it. It returns the
// value's kind and, for a number, its bits.
func (d *celJSONDecoder) skip() (kind uint8, bits uint64, err error) {
	if d.i < len(d.b) && d.b[d.i] == '"' { // the usual value: no call to Scalar
		end, fl, st := jsonscan.String(d.b, d.i)
		if st != jsonscan.OK {
			return 0, 0, d.fail(end, st)
		}
		plain := fl == 0 || plainString(d.s[d.i+1:end-1], fl)
		d.i = end
		if plain {
			return jsonString, 0, nil
		}
		return jsonStringEsc, 0, nil
	}
	end, k, fl, st := jsonscan.Scalar(d.b, d.i)
	if st != jsonscan.OK {
		return 0, 0, d.fail(end, st)
	}
	switch k {
	case jsonscan.KindObject, jsonscan.KindArray:
		if end, st = d.sc.Value(d.b, d.i, d.depth); st != jsonscan.OK {
			return 0, 0, d.fail(end, st)
		}
		d.i = end
		if k == jsonscan.KindObject {
			return jsonObject, 0, nil
		}
		return jsonArray, 0, nil
	case jsonscan.KindString:
		plain := fl == 0 || plainString(d.s[d.i+1:end-1], fl)
		d.i = end
		if plain {
			return jsonString, 0, nil
		}
		return jsonStringEsc, 0, nil
	case jsonscan.KindTrue:
		d.i = end
		return jsonTrue, 0, nil
	case jsonscan.KindFalse:
		d.i = end
		return jsonFalse, 0, nil
	case jsonscan.KindNull:
		d.i = end
		return jsonNull, 0, nil
	}
	return d.number(end, fl)
}

// plainString reports whether the text of a string, as scanned with flags
// fl, stands for itself: no escapes, valid UTF-8.
func plainString(text string, fl jsonscan.Flags) bool {
	return fl&jsonscan.Escaped == 0 && (fl&jsonscan.NonASCII == 0 || utf8.ValidString(text))
}

// str returns the string d.s[start:end] (its quotes included), scanned
// with flags fl, decoded. Without escapes or invalid UTF-8 it is a
// substring of the input, allocating nothing.
//
// str is called for every key: its usual case, ASCII without escapes, is
// small enough to be inlined; the rest is in strSlow.
func (d *celJSONDecoder) str(start, end int, fl jsonscan.Flags) string {
	if fl == 0 {
		return d.s[start+1 : end-1]
	}
	return d.strSlow(start, end, fl)
}

func (d *celJSONDecoder) strSlow(start, end int, fl jsonscan.Flags) string {
	if text := d.s[start+1 : end-1]; plainString(text, fl) {
		return text
	}
	return string(jsonscan.AppendString(make([]byte, 0, end-start), d.b[start+1:end-1]))
}

func (d *celJSONDecoder) array() (ref.Val, error) {
	if d.depth++; d.depth > jsonscan.MaxDepth {
		return nil, d.fail(d.i+1, jsonscan.TooDeep)
	}
	j, empty, st := d.sc.Open(d.b, d.i)
	if st != jsonscan.OK {
		return nil, d.fail(j, st)
	}
	d.i = j
	if empty {
		d.depth--
		return types.NewRefValList(types.DefaultTypeAdapter, []ref.Val{}), nil
	}
	start := len(d.elems)
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		var more bool
		if j, more, st = d.sc.Next(d.b, d.i, false); st != jsonscan.OK {
			return nil, d.fail(j, st)
		}
		d.i = j
		if !more {
			break
		}
	}
	elems := slices.Clone(d.elems[start:])
	d.elems = d.elems[:start]
	d.depth--
	return types.NewRefValList(types.DefaultTypeAdapter, elems), nil
}

// number converts the number d.s[d.i:end], scanned with flags fl, and
// moves past it: an int (jsonInt) when its text is an integer within
// int64, else a double (jsonDouble).
func (d *celJSONDecoder) number(end int, fl jsonscan.Flags) (kind uint8, bits uint64, err error) {
	text := d.s[d.i:end]
	d.i = end
	if fl&jsonscan.Integer != 0 {
		if n := len(text); n <= 18 || n == 19 && text[0] == '-' {
			var v int64
			j := 0
			if text[0] == '-' {
				j = 1
			}
			for ; j < n; j++ {
				v = v*10 + int64(text[j]-'0')
			}
			if text[0] == '-' {
				v = -v
			}
			return jsonInt, uint64(v), nil
		}
		if v, err := strconv.ParseInt(text, 10, 64); err == nil {
			return jsonInt, uint64(v), nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, 0, &jsonscan.SyntaxError{Offset: end, Msg: fmt.Sprintf("number %s out of range", text)}
	}
	return jsonDouble, math.Float64bits(f), nil
}

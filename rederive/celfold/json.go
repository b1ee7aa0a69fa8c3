package celfold

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// celJSONDecoder decodes JSON straight into CEL values. A number whose text is
// an integer (no fraction, no exponent) within int64 becomes an int; every
// other number a double. Objects become maps with string keys, arrays
// lists.
type celJSONDecoder struct {
	s       string
	i       int
	depth   int
	jfields []celJSONField // objects being indexed, innermost last
	elems   []ref.Val      // arrays under construction, innermost last
}

var celJSONDecoders = sync.Pool{New: func() any { return new(celJSONDecoder) }}

// decodeEventJSON decodes one JSON value. The result shares no memory with b.
func decodeEventJSON(b []byte) (ref.Val, error) {
	d := celJSONDecoders.Get().(*celJSONDecoder)
	d.s, d.i, d.depth = string(b), 0, 0
	v, err := d.value()
	if err == nil {
		d.skipSpace()
		if d.i < len(d.s) {
			v, err = nil, d.errorf("invalid character %q after top-level value", d.s[d.i])
		}
	}
	d.release()
	return v, err
}

// release returns d to the pool. Its scratch stacks keep references to
// the last event's values until overwritten; the pool drops idle decoders
// at garbage collection, and large stacks are not kept.
func (d *celJSONDecoder) release() {
	d.s = ""
	d.jfields, d.elems = d.jfields[:0], d.elems[:0]
	if cap(d.jfields) > 1024 || cap(d.elems) > 1024 {
		d.jfields, d.elems = nil, nil
	}
	celJSONDecoders.Put(d)
}

func (d *celJSONDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *celJSONDecoder) skipSpace() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *celJSONDecoder) value() (ref.Val, error) {
	d.skipSpace()
	if d.i >= len(d.s) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; c {
	case '{':
		return d.index()
	case '[':
		return d.array()
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return types.String(s), nil
	case 't':
		return d.literal("true", types.True)
	case 'f':
		return d.literal("false", types.False)
	case 'n':
		return d.literal("null", types.NullValue)
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return d.number()
		}
		return nil, d.errorf("invalid character %q looking for a value", c)
	}
}

func (d *celJSONDecoder) literal(lit string, v ref.Val) (ref.Val, error) {
	if !strings.HasPrefix(d.s[d.i:], lit) {
		return nil, d.errorf("invalid literal, want %s", lit)
	}
	d.i += len(lit)
	return v, nil
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
	d.i++ // {
	if d.depth++; d.depth > celMaxDepth {
		return nil, d.errorf("nested too deeply")
	}
	start := len(d.jfields)
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		d.depth--
		return &celJSONObject{src: d.s}, nil
	}
	for {
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, d.errorf("want a string key")
		}
		name, err := d.str()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, d.errorf("want ':' after object key")
		}
		d.i++
		d.skipSpace()
		f := celJSONField{name: name, start: d.i}
		if f.kind, f.bits, err = d.skip(); err != nil {
			return nil, err
		}
		f.end = d.i
		switch f.kind {
		case jsonStringEsc, jsonObject, jsonArray:
			f.once = new(celJSONOnce)
		}
		d.jfields = append(d.jfields, f)
		d.skipSpace()
		if d.i >= len(d.s) {
			return nil, d.errorf("unexpected end of input in object")
		}
		if c := d.s[d.i]; c == ',' {
			d.i++
			continue
		} else if c != '}' {
			return nil, d.errorf("invalid character %q after object value", c)
		}
		d.i++
		break
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
	d.skipSpace()
	if d.i >= len(d.s) {
		return 0, 0, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; c {
	case '{', '[':
		if d.depth++; d.depth > celMaxDepth {
			return 0, 0, d.errorf("nested too deeply")
		}
		d.i++
		kind, end := jsonArray, byte(']')
		if c == '{' {
			kind, end = jsonObject, '}'
		}
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == end {
			d.i++
			d.depth--
			return kind, 0, nil
		}
		for {
			if kind == jsonObject {
				d.skipSpace()
				if d.i >= len(d.s) || d.s[d.i] != '"' {
					return 0, 0, d.errorf("want a string key")
				}
				if _, err := d.skipStr(); err != nil {
					return 0, 0, err
				}
				d.skipSpace()
				if d.i >= len(d.s) || d.s[d.i] != ':' {
					return 0, 0, d.errorf("want ':' after object key")
				}
				d.i++
			}
			if _, _, err := d.skip(); err != nil {
				return 0, 0, err
			}
			d.skipSpace()
			if d.i >= len(d.s) {
				return 0, 0, d.errorf("unexpected end of input in %s", map[bool]string{true: "object", false: "array"}[kind == jsonObject])
			}
			if c := d.s[d.i]; c == ',' {
				d.i++
				continue
			} else if c != end {
				if kind == jsonObject {
					return 0, 0, d.errorf("invalid character %q after object value", c)
				}
				return 0, 0, d.errorf("invalid character %q after array element", c)
			}
			d.i++
			d.depth--
			return kind, 0, nil
		}
	case '"':
		esc, err := d.skipStr()
		if esc {
			return jsonStringEsc, 0, err
		}
		return jsonString, 0, err
	case 't':
		_, err := d.literal("true", types.True)
		return jsonTrue, 0, err
	case 'f':
		_, err := d.literal("false", types.False)
		return jsonFalse, 0, err
	case 'n':
		_, err := d.literal("null", types.NullValue)
		return jsonNull, 0, err
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return d.numberBits()
		}
		return 0, 0, d.errorf("invalid character %q looking for a value", c)
	}
}

// skipStr validates the string at d.i and moves past it. esc reports
// whether it needs decoding (escapes or invalid UTF-8).
func (d *celJSONDecoder) skipStr() (esc bool, err error) {
	s := d.s
	start := d.i + 1
	for i := start; i < len(s); {
		if i += plainRun(s, i); i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return false, nil
		case c == '\\' || c < 0x20:
			_, err := d.strSlow(start)
			return true, err
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				_, err := d.strSlow(start)
				return true, err
			}
			i += size
		}
	}
	d.i = len(s)
	return false, d.errorf("unterminated string")
}

func (d *celJSONDecoder) array() (ref.Val, error) {
	d.i++ // [
	if d.depth++; d.depth > celMaxDepth {
		return nil, d.errorf("nested too deeply")
	}
	start := len(d.elems)
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		d.depth--
		return types.NewRefValList(types.DefaultTypeAdapter, []ref.Val{}), nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		d.skipSpace()
		if d.i >= len(d.s) {
			return nil, d.errorf("unexpected end of input in array")
		}
		if c := d.s[d.i]; c == ',' {
			d.i++
			continue
		} else if c != ']' {
			return nil, d.errorf("invalid character %q after array element", c)
		}
		d.i++
		break
	}
	elems := slices.Clone(d.elems[start:])
	d.elems = d.elems[:start]
	d.depth--
	return types.NewRefValList(types.DefaultTypeAdapter, elems), nil
}

func (d *celJSONDecoder) number() (ref.Val, error) {
	kind, bits, err := d.numberBits()
	if err != nil {
		return nil, err
	}
	if kind == jsonInt {
		return types.Int(int64(bits)), nil
	}
	return types.Double(math.Float64frombits(bits)), nil
}

// numberBits reads the number at d.i: an int (jsonInt) when its text is an
// integer within int64, else a double (jsonDouble).
func (d *celJSONDecoder) numberBits() (kind uint8, bits uint64, err error) {
	s, start, i := d.s, d.i, d.i
	if s[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		digits()
	default:
		d.i = i
		return 0, 0, d.errorf("invalid number")
	}
	isInt := true
	if i < len(s) && s[i] == '.' {
		i++
		isInt = false
		if digits() == 0 {
			d.i = i
			return 0, 0, d.errorf("invalid number: want a digit after '.'")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		isInt = false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			d.i = i
			return 0, 0, d.errorf("invalid number: want a digit in the exponent")
		}
	}
	d.i = i
	text := s[start:i]
	if isInt {
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
		return 0, 0, d.errorf("number %s out of range", text)
	}
	return jsonDouble, math.Float64bits(f), nil
}

// str decodes a string at d.i (an opening quote). Without escapes or
// invalid UTF-8 it is a substring of the input, allocating nothing.
func (d *celJSONDecoder) str() (string, error) {
	s := d.s
	start := d.i + 1
	for i := start; i < len(s); {
		if i += plainRun(s, i); i >= len(s) {
			break
		}
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return s[start:i], nil
		case c == '\\' || c < 0x20:
			return d.strSlow(start)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return d.strSlow(start)
			}
			i += size
		}
	}
	d.i = len(s)
	return "", d.errorf("unterminated string")
}

func (d *celJSONDecoder) strSlow(start int) (string, error) {
	s := d.s
	b := make([]byte, 0, 2*(len(s)-start)/3+8)
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return string(b), nil
		case c < 0x20:
			d.i = i
			return "", d.errorf("invalid control character %#x in string", c)
		case c == '\\':
			if i+1 >= len(s) {
				d.i = i
				return "", d.errorf("unterminated string")
			}
			switch e := s[i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
				i += 2
			case 'b':
				b = append(b, '\b')
				i += 2
			case 'f':
				b = append(b, '\f')
				i += 2
			case 'n':
				b = append(b, '\n')
				i += 2
			case 'r':
				b = append(b, '\r')
				i += 2
			case 't':
				b = append(b, '\t')
				i += 2
			case 'u':
				r, ok := celHex4(s, i+2)
				if !ok {
					d.i = i
					return "", d.errorf("invalid \\u escape")
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2, ok = celHex4(s, i+2)
					}
					if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				d.i = i
				return "", d.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
	}
	d.i = len(s)
	return "", d.errorf("unterminated string")
}

func celHex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// decode builds a Go value (as encoding/json's UseNumber reads it: numbers
// as json.Number) from the primitives alone, recursively: the builder the
// differential tests compare with encoding/json.
func decode(b []byte) (any, error) {
	var s Scanner
	i := SkipSpace(b, 0)
	v, i, st := build(&s, b, i, 0)
	if st == OK {
		i, st = End(b, i)
	}
	if st != OK {
		return nil, Err(b, i, st)
	}
	return v, nil
}

func build(s *Scanner, b []byte, i, depth int) (any, int, Status) {
	if i >= len(b) {
		return nil, i, badValue | truncated
	}
	switch b[i] {
	case '{', '[':
		object := b[i] == '{'
		if depth >= MaxDepth {
			return nil, i, TooDeep
		}
		j, empty, st := s.Open(b, i)
		if st != OK {
			return nil, j, st
		}
		m, a := map[string]any{}, []any{}
		for !empty {
			var key string
			if object {
				end, vi, fl, st := s.Key(b, j)
				if st != OK {
					return nil, end, st
				}
				key = str(b[j:end], fl)
				j = vi
			}
			var v any
			if v, j, st = build(s, b, j, depth+1); st != OK {
				return nil, j, st
			}
			if object {
				m[key] = v
			} else {
				a = append(a, v)
			}
			var more bool
			if j, more, st = s.Next(b, j, object); st != OK {
				return nil, j, st
			}
			empty = !more
		}
		if object {
			return m, j, OK
		}
		return a, j, OK
	case '"':
		end, fl, st := String(b, i)
		if st != OK {
			return nil, end, st
		}
		return str(b[i:end], fl), end, OK
	case 't', 'f', 'n':
		end, st := Literal(b, i)
		if st != OK {
			return nil, end, st
		}
		return map[byte]any{'t': true, 'f': false, 'n': nil}[b[i]], end, OK
	}
	end, _, st := Number(b, i)
	if st != OK {
		return nil, end, st
	}
	return json.Number(b[i:end]), end, OK
}

func str(q []byte, fl Flags) string {
	if fl&Escaped == 0 && (fl&NonASCII == 0 || utf8.Valid(q[1:len(q)-1])) {
		return string(q[1 : len(q)-1])
	}
	return string(AppendString(nil, q[1:len(q)-1]))
}

func stdDecode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("more than one value")
	}
	return v, nil
}

// check compares jsonscan with encoding/json on b: Valid agrees with
// json.Valid, Value with Valid, and a valid text decodes to the same value.
func check(t *testing.T, b []byte) {
	t.Helper()
	valid := json.Valid(b)
	if got := Valid(b); got != valid {
		t.Fatalf("%q: Valid %v, json.Valid %v", b, got, valid)
	}
	v, err := decode(b)
	if (err == nil) != valid {
		t.Fatalf("%q: decode error %v, json.Valid %v", b, err, valid)
	}
	if !valid {
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(b) {
			t.Fatalf("%q: error %v", b, err)
		}
		return
	}
	want, err := stdDecode(b)
	if err != nil {
		t.Fatalf("%q: valid, but encoding/json decodes: %v", b, err)
	}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("%q: decoded %#v, encoding/json %#v", b, v, want)
	}
}

var seeds = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `tru`, `fals`, `nulL`, `0`, `-0`, `01`, `-`, `-a`, `1.`, `.5`, `1.5`,
	`1e`, `1e+`, `1E-7`, `1e400`, `+1`, `12345678901234567890123`, `-9223372036854775809`, ` 1 `, `1 2`, `{} x`,
	`""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u0041\u00e9\u4e2d\ud83d\ude00"`, `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`,
	`"\ud800\ud800"`, "\"\xff\xfe\"", "\"é\"", `"abc`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", "\"a\x7f\"",
	`"` + strings.Repeat("abcdefg\u00e9", 5) + `\n"`, `"0123456789abcdef"`, "\"01234567\x00\"",
	`[]`, `[1,[2,[3]]]`, `{}`, ` { "a" : [ 1 , { } ] } `, `{"a":1,"a":2}`, `[1,]`, `[1 2]`, `{"a"}`, `{"a":}`,
	`{a:1}`, `{"a":1,}`, `{"a":1`, `[`, `{`, `{"a" 1}`, `[1}`, `{"a":1]`, "{\"a\":\n1}", `{"\u00e9":1,"\n":2}`,
	"[\"\xed\xa0\x80\"]", `{"a":[1,2.5,{"c":null}],"b":"x"}`, `NaN`, `[-]`, `[0x1]`, `[1.e5]`,
}

func TestAgainstEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
}

// TestDepth: MaxDepth containers are taken, one more is not, as
// encoding/json; Value counts the containers open around it.
func TestDepth(t *testing.T) {
	for _, n := range []int{63, 64, 65, MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		b := []byte(strings.Repeat(`[{"a":`, n/2) + strings.Repeat("[", n%2) + "1" + strings.Repeat("]", n%2) + strings.Repeat("}]", n/2))
		check(t, b)
		if got, want := Valid(b), n <= MaxDepth; got != want {
			t.Fatalf("depth %d: Valid %v", n, got)
		}
	}
	var s Scanner
	b := []byte(strings.Repeat("[", 10) + strings.Repeat("]", 10))
	if _, st := s.Value(b, 0, MaxDepth-10); st != OK {
		t.Fatalf("10 levels inside %d: %v", MaxDepth-10, Err(b, 0, st))
	}
	if off, st := s.Value(b, 0, MaxDepth-9); st != TooDeep || off != 9 {
		t.Fatalf("10 levels inside %d: offset %d %v", MaxDepth-9, off, Err(b, off, st))
	}
}

// TestTruncated: every proper prefix of a valid value that is not itself
// valid is truncated (a stream reader reads on), and no invalid text is.
func TestTruncated(t *testing.T) {
	full := []byte(` {"a" : [1, -2.5e+3, "x\u00e9\"y\n", true, false, null, {"b":{}}], "c":"` + strings.Repeat("z", 20) + `"} `)
	var s Scanner
	for n := 0; n < len(full); n++ {
		b := full[:n]
		i := SkipSpace(b, 0)
		off, st := s.Value(b, i, 0)
		if st == OK {
			// Only a whole value is OK: here, the full object.
			if off != len(full)-1 {
				t.Fatalf("prefix %q: OK at %d", b, off)
			}
			continue
		}
		if !st.Truncated() {
			t.Fatalf("prefix %q: %v, not truncated", b, Err(b, off, st))
		}
	}
	for _, s := range []string{`[1,]`, `{"a"}`, `nulL`, `"\x"`, "\"\x01", `[1 2]`} {
		var sc Scanner
		off, st := sc.Value([]byte(s), 0, 0)
		if st == OK || st.Truncated() {
			t.Fatalf("%q: offset %d status %#x", s, off, st)
		}
	}
}

// TestOneLineAndSpace: a one-line scanner refuses a newline and counts
// the white space it skips.
func TestOneLineAndSpace(t *testing.T) {
	b := []byte("{ \"a\" :\t[1 , 2],\r\"b\":{} }")
	s := Scanner{OneLine: true}
	if off, st := s.Value(b, 0, 0); st != OK || off != len(b) || s.Space != 7 {
		t.Fatalf("offset %d status %v space %d", off, Err(b, off, st), s.Space)
	}
	b = []byte("{\"a\":\n1}")
	s = Scanner{OneLine: true}
	off, st := s.Value(b, 0, 0)
	if st == OK || st.Truncated() || off != 5 {
		t.Fatalf("newline: offset %d %v", off, Err(b, off, st))
	}
	if err := Err(b, off, st); !strings.Contains(err.Error(), "newline") {
		t.Fatalf("newline: %v", err)
	}
}

// TestStringFlags: flags tell escapes and non-ASCII bytes wherever they
// are in a string (before, across and after its 8-byte words).
func TestStringFlags(t *testing.T) {
	for n := 0; n < 20; n++ {
		pad := strings.Repeat("x", n)
		for _, c := range []struct {
			mid string
			fl  Flags
		}{{"", 0}, {"\u00e9", NonASCII}, {`\n`, Escaped}, {"\xff", NonASCII}, {`\u00e9`, Escaped}} {
			for _, s := range []string{`"` + pad + c.mid + `"`, `"` + c.mid + pad + `"`, `"` + pad + c.mid + pad + `"`} {
				end, fl, st := String([]byte(s+",1"), 0)
				if st != OK || end != len(s) || fl != c.fl {
					t.Fatalf("%q: end %d flags %d status %d", s, end, fl, st)
				}
			}
		}
	}
}

// TestErrorMessages: the words and offsets of errors (what celfold's
// decode errors say).
func TestErrorMessages(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"kind":"x","k":"a"`, "json: offset 19: unexpected end of input in object"},
		{`not json`, "json: offset 0: invalid literal, want null"},
		{`[x]`, "json: offset 1: invalid character 'x' looking for a value"},
		{`{"a" 1}`, "json: offset 5: want ':' after object key"},
		{`{1:2}`, "json: offset 1: want a string key"},
		{`[1 2]`, "json: offset 3: invalid character '2' after array element"},
		{`"a\qb"`, `json: offset 2: invalid escape \q`},
		{"\"a\x01\"", "json: offset 2: invalid control character 0x1 in string"},
		{`"\u12x4"`, `json: offset 1: invalid \u escape`},
		{`"abc`, "json: offset 4: unterminated string"},
		{`1.x`, "json: offset 2: invalid number: want a digit after '.'"},
		{`1ex`, "json: offset 2: invalid number: want a digit in the exponent"},
		{`-x`, "json: offset 1: invalid number"},
		{`1 2`, "json: offset 2: invalid character '2' after top-level value"},
		{strings.Repeat("[", MaxDepth+1), "json: offset 10000: nested too deeply"},
	} {
		_, err := decode([]byte(c.in))
		if err == nil || err.Error() != c.want {
			t.Errorf("%.20q: %v, want %s", c.in, err, c.want)
		}
	}
}

// FuzzAgainstEncodingJSON is the differential fuzz target: jsonscan and
// encoding/json take the same texts, and decode them to the same values.
func FuzzAgainstEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		check(t, b)
		// A prefix of a valid text that is not valid is truncated.
		if json.Valid(b) {
			for _, n := range []int{len(b) / 2, len(b) - 1} {
				if n < 0 || json.Valid(b[:n]) {
					continue
				}
				var s Scanner
				p := b[:n]
				i := SkipSpace(p, 0)
				i, st := s.Value(p, i, 0)
				if st == OK {
					i, st = End(p, i)
				}
				if st != OK && !st.Truncated() {
					t.Fatalf("prefix %q of %q: %v, not truncated", p, b, Err(p, i, st))
				}
			}
		}
	})
}

// special finds every byte a JSON string ends or escapes at, in any of the
// 8 places (moved here from package ingest with the scanner).
func TestSpecial(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			b := []byte("aaaaaaaa")
			b[pos] = byte(c)
			want := c == '"' || c == '\\' || c < 0x20
			m := special(binary.LittleEndian.Uint64(b))
			if want && m == 0 {
				t.Fatalf("byte %#x at %d not found", c, pos)
			}
			if want && bits.TrailingZeros64(m)>>3 != pos {
				t.Fatalf("byte %#x at %d: first flagged byte %d", c, pos, bits.TrailingZeros64(m)>>3)
			}
			if !want && m != 0 && pos == 0 {
				t.Errorf("byte %#x alone is flagged", c)
			}
		}
	}
}

// TestStringBytewise checks String, which goes 8 bytes at a time, against
// a byte-by-byte scan: every byte value at every position of a run of
// plain bytes, and random mixes of plain and special bytes (moved here
// from package celfold's TestPlainRun with the scanner).
func TestStringBytewise(t *testing.T) {
	want := func(b []byte) (int, Flags, bool) {
		var fl Flags
		for j := 1; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				return j + 1, fl, true
			case c == '\\':
				if j+1 >= len(b) {
					return 0, fl, false
				}
				fl |= Escaped
				switch b[j+1] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					j++
				case 'u':
					if j+6 > len(b) {
						return 0, fl, false
					}
					for _, h := range b[j+2 : j+6] {
						if !isHex(h) {
							return 0, fl, false
						}
					}
					j += 5
				default:
					return 0, fl, false
				}
			case c < 0x20:
				return 0, fl, false
			case c >= 0x80:
				fl |= NonASCII
			}
		}
		return 0, fl, false
	}
	check := func(b []byte) {
		end, fl, st := String(b, 0)
		wend, wfl, ok := want(b)
		if ok != (st == OK) || ok && (end != wend || fl != wfl) {
			t.Fatalf("%q: end %d flags %d status %d, want end %d flags %d ok %v", b, end, fl, st, wend, wfl, ok)
		}
	}
	for _, fill := range []byte{'a', ' ', '~', '!', '#', '[', ']', 0x7f} {
		for pos := range 20 {
			for c := range 256 {
				b := bytes.Repeat([]byte{fill}, 26)
				b[0], b[25] = '"', '"'
				b[pos+1] = byte(c)
				check(b)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 0x1f, 0x20, 0x21, '"', 0x23, '\\', 0x5b, 0x5d, 0x7f, 0x80, 0xc3, 0xff, 'a', 'b', 'c', 'u', 'n', '0'}
	for range 100_000 {
		b := make([]byte, 1+r.IntN(40))
		b[0] = '"'
		for i := 1; i < len(b); i++ {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(b)
	}
}

// TestNextKey checks NextKey, the one-step member scan, against Next and
// then Key, the two steps it stands for: the same outcome, offsets,
// flags, status and white-space count for what may follow a member's
// value, cut at every length, with and without OneLine.
func TestNextKey(t *testing.T) {
	tails := []string{
		`,"k":1}`, `}`, ` }`, "\t,\r\"k\" :\n 1}", `, "k": 1}`, `,"k" :1}`, `,"k": 1}`,
		`,"\u00e9\n":1}`, ",\"\xc3\xa9\":1}", `,"k":"v"}`, `,"k":{}}`,
		`,}`, `,,"k":1}`, `,"k"1}`, `,"k",1}`, `,k:1}`, `,1:1}`, `]`, `x`, `,"k\x":1}`, "\"k\":1}",
		`,"` + strings.Repeat("k", 20) + `":1}`,
	}
	for _, oneLine := range []bool{false, true} {
		for _, tail := range tails {
			for n := 0; n <= len(tail); n++ {
				b := []byte(`{"a":1` + tail[:n])
				const i = len(`{"a":1`)
				s1, s2 := Scanner{OneLine: oneLine}, Scanner{OneLine: oneLine}
				key, end, value, fl, more, st := s1.NextKey(b, i)
				j, wmore, wst := s2.Next(b, i, true)
				wkey, wend, wvalue, wfl := 0, j, 0, Flags(0)
				if wst == OK && wmore {
					wkey = j
					wend, wvalue, wfl, wst = s2.Key(b, j)
				}
				if st != wst || more != (wmore && wst == OK) || end != wend || s1.Space != s2.Space ||
					st == OK && more && (key != wkey || value != wvalue || fl != wfl) {
					t.Fatalf("oneLine %v, %q: NextKey key %d end %d value %d flags %d more %v status %#x space %d;\n"+
						"Next, Key: key %d end %d value %d flags %d more %v status %#x space %d",
						oneLine, b, key, end, value, fl, more, st, s1.Space, wkey, wend, wvalue, wfl, wmore, wst, s2.Space)
				}
			}
		}
	}
	// A few outcomes spelled out: Key shares NextKey's code, so the
	// comparison above does not check the key's part on its own.
	for _, c := range []struct {
		in         string
		key        int
		end, value int
		fl         Flags
		more       bool
		st         Status
	}{
		{`,"k":1`, 1, 4, 5, 0, true, OK},
		{`,"\n":1`, 1, 5, 6, Escaped, true, OK},
		{",\"\xc3\xa9\":1", 1, 5, 6, NonASCII, true, OK},
		{` , "k" : 1`, 3, 6, 9, 0, true, OK},
		{`}`, 0, 1, 0, 0, false, OK},
		{` }`, 0, 2, 0, 0, false, OK},
		{`,}`, 0, 1, 0, 0, false, badKey},
		{`,"k"1`, 0, 4, 0, 0, false, badColon},
		{`,"k":`, 1, 4, 5, 0, true, OK}, // the value's absence is the caller's to find
		{`,"k"`, 0, 4, 0, 0, false, badColon | truncated},
		{`,`, 0, 1, 0, 0, false, badKey | truncated},
		{``, 0, 0, 0, 0, false, badAfterObjectValue | truncated},
		{`]`, 0, 0, 0, 0, false, badAfterObjectValue},
	} {
		var s Scanner
		key, end, value, fl, more, st := s.NextKey([]byte(c.in), 0)
		if end != c.end || more != c.more || st != c.st || more && (key != c.key || value != c.value || fl != c.fl) {
			t.Errorf("%q: key %d end %d value %d flags %d more %v status %#x, want key %d end %d value %d flags %d more %v status %#x",
				c.in, key, end, value, fl, more, st, c.key, c.end, c.value, c.fl, c.more, c.st)
		}
	}
}

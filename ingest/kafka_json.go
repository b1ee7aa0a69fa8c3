package ingest

import (
	"encoding/binary"
	"unicode/utf8"
)

// maxJSONDepth is encoding/json's nesting limit: json.Valid rejects a value
// nested deeper.
const maxJSONDepth = 10000

// payloadKind reports, in one pass over v, what json.Valid(v) and
// utf8.Valid(v) report: whether v is one JSON value (with surrounding
// white space) and whether it is valid UTF-8. The two become leaf marks
// (merkle.MarkNotJSON, merkle.MarkNotUTF8), so they must agree with those
// functions byte for byte: FuzzPayloadKind checks it.
func payloadKind(v []byte) (isJSON, isUTF8 bool) {
	s := jsonScan{b: v, utf8: true}
	if !s.valid() {
		// Rare: check the UTF-8 apart rather than track where the scan
		// stopped.
		return false, utf8.Valid(v)
	}
	return true, s.utf8
}

// jsonScan validates one JSON value, noting invalid UTF-8 in its strings
// (the only place a valid value can hold non-ASCII bytes).
type jsonScan struct {
	b    []byte
	i    int
	utf8 bool
}

// strPlain marks the bytes a string holds as they are: not '"', '\\', a
// control character or a non-ASCII byte.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// valid scans the whole input as one value: iterative, with a stack of the
// open containers ('{' or '[').
func (s *jsonScan) valid() bool {
	var buf [64]byte
	stack := buf[:0]
	s.ws()
	for {
		// A value is expected at s.i.
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			if len(stack) == maxJSONDepth {
				return false
			}
			stack = append(stack, c)
			s.i++
			s.ws()
			if s.i < len(s.b) && s.b[s.i] == c+2 { // '}' or ']'
				stack = stack[:len(stack)-1]
				s.i++
				break
			}
			if c == '{' && !s.key() {
				return false
			}
			continue
		case '"':
			if !s.str() {
				return false
			}
		case 't':
			if !s.lit("true") {
				return false
			}
		case 'f':
			if !s.lit("false") {
				return false
			}
		case 'n':
			if !s.lit("null") {
				return false
			}
		default:
			if !s.num() {
				return false
			}
		}
		// After a value: close containers, or go on to the next element.
		var ok, more bool
		if stack, ok, more = s.after(stack); !ok {
			return false
		} else if !more {
			return true
		}
	}
}

// after consumes what follows a value: closing brackets, then a comma (and
// a key in an object) before the next value (more), or the end of the
// input with every container closed.
func (s *jsonScan) after(stack []byte) (_ []byte, ok, more bool) {
	for {
		s.ws()
		if len(stack) == 0 {
			return stack, s.i == len(s.b), false
		}
		if s.i >= len(s.b) {
			return stack, false, false
		}
		top, c := stack[len(stack)-1], s.b[s.i]
		switch {
		case c == ',':
			s.i++
			s.ws()
			if top == '{' && !s.key() {
				return stack, false, false
			}
			return stack, true, true
		case c == top+2:
			stack = stack[:len(stack)-1]
			s.i++
		default:
			return stack, false, false
		}
	}
}

// key consumes an object member's name and its colon.
func (s *jsonScan) key() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
		return false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	s.ws()
	return true
}

func (s *jsonScan) lit(w string) bool {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return false
	}
	s.i += len(w)
	return true
}

// str consumes a string, s.b[s.i] being its opening quote.
func (s *jsonScan) str() bool {
	b := s.b
	i := s.i + 1
	for {
		i = plainRun(b, i)
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			n, ok := escapeLen(b[i:])
			if !ok {
				return false
			}
			i += n
		case c < 0x20:
			return false
		default: // non-ASCII: any byte is JSON here, UTF-8 or not
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				s.utf8 = false
			}
			i += n
		}
	}
}

// plainRun returns the end of the run of plain string bytes (strPlain)
// from i: eight at a time while none of the eight is special.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(b)-i >= 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		// The high bit of a byte of each is set where a byte is below
		// 0x20, a quote or a backslash (exact for whether any is, which is
		// all this asks), and of x where a byte is not ASCII.
		q, bs := x^('"'*ones), x^('\\'*ones)
		ctl := (x - 0x20*ones) &^ x
		quote := (q - ones) &^ q
		bslash := (bs - ones) &^ bs
		if (x|ctl|quote|bslash)&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(b) && strPlain[b[i]] {
		i++
	}
	return i
}

// escapeLen returns the length of the escape sequence b starts with.
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, true
	case 'u':
		if len(b) < 6 {
			return 0, false
		}
		for _, h := range b[2:6] {
			if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
				return 0, false
			}
		}
		return 6, true
	}
	return 0, false
}

// num consumes a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) num() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

package ingest

import "encoding/binary"

// scanValue validates the JSON value at the start of b as encoding/json's
// scanner would, returning its length and adding the bytes of its
// insignificant whitespace to *space. It is conservative: what it takes,
// encoding/json takes as the same value; what it does not (a mistake,
// nesting past maxFastDepth, a newline when oneLine) it bails on.
func scanValue(b []byte, oneLine bool, space *int) (int, fastStatus) {
	var stack [maxFastDepth]byte // the open containers, '{' or '['
	depth, i := 0, 0
	var st fastStatus
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, fastMore
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth == maxFastDepth {
				return 0, fastBail
			}
			stack[depth] = c
			depth++
			if i, st = skipSpace(b, i+1, oneLine, space); st != fastOK {
				return 0, st
			}
			if b[i] == c+2 { // '}' or ']': empty
				depth--
				i++
				break
			}
			if c == '{' {
				if i, st = objectKey(b, i, oneLine, space); st != fastOK {
					return 0, st
				}
			}
			continue
		case '"':
			if i, st = scanString(b, i); st != fastOK {
				return 0, st
			}
		case 't':
			if i, st = literal(b, i, "true"); st != fastOK {
				return 0, st
			}
		case 'f':
			if i, st = literal(b, i, "false"); st != fastOK {
				return 0, st
			}
		case 'n':
			if i, st = literal(b, i, "null"); st != fastOK {
				return 0, st
			}
		default:
			if i, st = scanNumber(b, i); st != fastOK {
				return 0, st
			}
		}
		// A value ended at b[i]: close containers, or go on to the next.
		for {
			if depth == 0 {
				return i, fastOK
			}
			if i, st = skipSpace(b, i, oneLine, space); st != fastOK {
				return 0, st
			}
			c := b[i]
			if c == stack[depth-1]+2 {
				depth--
				i++
				continue
			}
			if c != ',' {
				return 0, fastBail
			}
			if i, st = skipSpace(b, i+1, oneLine, space); st != fastOK {
				return 0, st
			}
			if stack[depth-1] == '{' {
				if i, st = objectKey(b, i, oneLine, space); st != fastOK {
					return 0, st
				}
			}
			break
		}
	}
}

// objectKey scans `"key" :` and the space after it, from b[i].
func objectKey(b []byte, i int, oneLine bool, space *int) (int, fastStatus) {
	if b[i] != '"' {
		return 0, fastBail
	}
	i, st := scanString(b, i)
	if st != fastOK {
		return 0, st
	}
	if i, st = skipSpace(b, i, oneLine, space); st != fastOK {
		return 0, st
	}
	if b[i] != ':' {
		return 0, fastBail
	}
	return skipSpace(b, i+1, oneLine, space)
}

// strSafe marks the bytes that stand for themselves in a JSON string:
// all but the quote, the backslash and control characters. Bytes of 0x80
// and up are taken as they are, valid UTF-8 or not, as encoding/json
// keeps them in a json.RawMessage.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString returns the offset after the string starting at b[i] ('"').
// It goes 8 bytes at a time while none of them needs a look.
func scanString(b []byte, i int) (int, fastStatus) {
	j := i + 1
	for {
		for j+8 <= len(b) && special(binary.LittleEndian.Uint64(b[j:])) == 0 {
			j += 8
		}
		end := min(j+8, len(b))
		for j < end && strSafe[b[j]] {
			j++
		}
		if j == end {
			if j == len(b) {
				return 0, fastMore
			}
			continue
		}
		switch b[j] {
		case '"':
			return j + 1, fastOK
		case '\\':
			if j+1 >= len(b) {
				return 0, fastMore
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) {
					return 0, fastMore
				}
				for _, h := range b[j+2 : j+6] {
					if !isHex(h) {
						return 0, fastBail
					}
				}
				j += 6
			default:
				return 0, fastBail
			}
		default:
			return 0, fastBail // a control character
		}
	}
}

// special is non-zero if one of the 8 bytes of x is a quote, a backslash
// or a control character (it may also be for other bytes after one that
// is: a borrow; never zero when one is).
func special(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	return ((q-lo)&^q | (bs-lo)&^bs | (x-lo*0x20)&^x) & hi
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// literal matches true, false or null at b[i].
func literal(b []byte, i int, lit string) (int, fastStatus) {
	if len(b)-i < len(lit) {
		if string(b[i:]) == lit[:len(b)-i] {
			return 0, fastMore
		}
		return 0, fastBail
	}
	if string(b[i:i+len(lit)]) != lit {
		return 0, fastBail
	}
	return i + len(lit), fastOK
}

// scanNumber returns the offset after the number at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. What follows it is
// checked by the caller (a delimiter or space, or it bails).
func scanNumber(b []byte, i int) (int, fastStatus) {
	j := i
	if b[j] == '-' {
		j++
	}
	digits := func() (int, fastStatus) { // one or more digits from j
		k := j
		for k < len(b) && isDigit(b[k]) {
			k++
		}
		switch {
		case k == len(b):
			return 0, fastMore // a number in an object goes on to a delimiter
		case k == j:
			return 0, fastBail
		}
		return k, fastOK
	}
	if j >= len(b) {
		return 0, fastMore
	}
	var st fastStatus
	switch {
	case b[j] == '0':
		j++
	case isDigit(b[j]):
		if j, st = digits(); st != fastOK {
			return 0, st
		}
	default:
		return 0, fastBail
	}
	if j >= len(b) {
		return 0, fastMore
	}
	if b[j] == '.' {
		j++
		if j, st = digits(); st != fastOK {
			return 0, st
		}
	}
	if b[j] == 'e' || b[j] == 'E' {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j, st = digits(); st != fastOK {
			return 0, st
		}
	}
	return j, fastOK
}

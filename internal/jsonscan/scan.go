// Package jsonscan is auditd's one JSON scanner: the grammar of RFC 8259
// as encoding/json reads it (what json.Valid takes, jsonscan takes), its
// nesting limit, its number syntax and its string escapes, in one place.
// It validates and locates; it builds nothing. Its callers are builders on
// it: the body decoder's fast path (package ingest) and the lazy decoder of
// events into CEL values (package celfold).
//
// Every function reads b from an offset and returns the offset after what
// it read, or, with a Status other than OK, the offset of the problem. A
// Status says whether the input ended too soon (Truncated: more input
// might make it valid, which a reader of a stream uses to read on) and
// words the error (Err). Nothing here allocates but Err and AppendString.
// Invalid UTF-8 is taken as encoding/json takes it: as it is in a
// json.RawMessage, replaced by U+FFFD when a string is decoded.
package jsonscan

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that is taken:
// encoding/json's limit (json.Valid rejects a value nested deeper).
const MaxDepth = 10000

// Status is the outcome of a scan: OK, or what is wrong at the offset
// returned.
type Status uint8

// truncated marks a status for input that ended before the problem could
// be told from a value cut short.
const truncated Status = 0x80

// The statuses. A truncated one is the same problem at the end of the
// input (the code with the truncated bit).
const (
	OK Status = iota
	badValue
	badLiteral
	badNumber
	badFraction
	badExponent
	badKey
	badColon
	badAfterObjectValue
	badAfterArrayElement
	badAfterTopLevel
	badControl
	badEscape
	badUnicodeEscape
	badString // unterminated
	TooDeep   // nested past MaxDepth (for a builder that nests itself)
	newline
)

// Truncated reports whether the input ended inside the value: with more
// input it may still be valid.
func (st Status) Truncated() bool { return st&truncated != 0 }

// Flags describe a string's text.
type Flags uint8

const (
	Escaped  Flags = 1 << iota // a string with an escape: decode it with AppendString
	NonASCII                   // a string with bytes of 0x80 and up (not checked as UTF-8)
	Integer                    // a number without a fraction or an exponent
)

// Kind is the kind of a JSON value.
type Kind uint8

const (
	KindNull Kind = iota
	KindFalse
	KindTrue
	KindNumber
	KindString
	KindObject
	KindArray
)

// Scalar scans the value at b[i] (not white space): a string, a number or
// a literal to its end, with its flags; of an object or an array it only
// tells the kind (the offset returned is i, for Scanner.Value or the
// builder's own descent).
func Scalar(b []byte, i int) (int, Kind, Flags, Status) {
	if i >= len(b) {
		return i, 0, 0, badValue | truncated
	}
	switch b[i] {
	case '{':
		return i, KindObject, 0, OK
	case '[':
		return i, KindArray, 0, OK
	case '"':
		end, fl, st := String(b, i)
		return end, KindString, fl, st
	case 't':
		end, st := Literal(b, i)
		return end, KindTrue, 0, st
	case 'f':
		end, st := Literal(b, i)
		return end, KindFalse, 0, st
	case 'n':
		end, st := Literal(b, i)
		return end, KindNull, 0, st
	}
	end, isInt, st := Number(b, i)
	if isInt {
		return end, KindNumber, Integer, st
	}
	return end, KindNumber, 0, st
}

// SyntaxError is a JSON syntax error at a byte offset of the input.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("json: offset %d: %s", e.Offset, e.Msg) }

// Err words st, the status of a scan of b that stopped at offset off, as
// a *SyntaxError (nil for OK).
func Err(b []byte, off int, st Status) error {
	if st == OK {
		return nil
	}
	at := func(k int) byte {
		if k < len(b) {
			return b[k]
		}
		return 0
	}
	var msg string
	switch st &^ truncated {
	case badValue:
		msg = "unexpected end of input"
		if off < len(b) {
			msg = fmt.Sprintf("invalid character %q looking for a value", b[off])
		}
	case badLiteral:
		lit := "null"
		switch at(off) {
		case 't':
			lit = "true"
		case 'f':
			lit = "false"
		}
		msg = "invalid literal, want " + lit
	case badNumber:
		msg = "invalid number"
	case badFraction:
		msg = "invalid number: want a digit after '.'"
	case badExponent:
		msg = "invalid number: want a digit in the exponent"
	case badKey:
		msg = "want a string key"
	case badColon:
		msg = "want ':' after object key"
	case badAfterObjectValue:
		msg = "unexpected end of input in object"
		if off < len(b) {
			msg = fmt.Sprintf("invalid character %q after object value", b[off])
		}
	case badAfterArrayElement:
		msg = "unexpected end of input in array"
		if off < len(b) {
			msg = fmt.Sprintf("invalid character %q after array element", b[off])
		}
	case badAfterTopLevel:
		msg = fmt.Sprintf("invalid character %q after top-level value", at(off))
	case badControl:
		msg = fmt.Sprintf("invalid control character %#x in string", at(off))
	case badEscape:
		msg = fmt.Sprintf("invalid escape \\%c", at(off+1))
	case badUnicodeEscape:
		msg = "invalid \\u escape"
	case badString:
		msg = "unterminated string"
	case TooDeep:
		msg = "nested too deeply"
	case newline:
		msg = "a newline inside a one-line value"
	default:
		msg = "invalid JSON"
	}
	return &SyntaxError{Offset: off, Msg: msg}
}

var space = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return space[c] }

// SkipSpace returns the offset of the first byte at or after i that is not
// white space (len(b) if none is).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && space[b[i]] {
		i++
	}
	return i
}

// End checks that only white space follows a top-level value ending at i.
func End(b []byte, i int) (int, Status) {
	if i = SkipSpace(b, i); i < len(b) {
		return i, badAfterTopLevel
	}
	return i, OK
}

// String scans the string whose opening quote is at b[i], returning the
// offset after its closing quote. It goes 8 bytes at a time while none
// needs a look. Bytes of 0x80 and up are taken as they are (encoding/json
// takes invalid UTF-8), flagged NonASCII: a builder that needs valid
// UTF-8 checks those strings only.
func String(b []byte, i int) (int, Flags, Status) {
	j := i + 1
	var fl Flags
	var seen uint64 // the bytes passed, ORed: their high bits tell non-ASCII
	for {
		for j+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[j:])
			if m := special(x); m != 0 {
				// b[j+n] is the first special byte; the bits below its
				// high bit are the n bytes before it (none when n is 0).
				seen |= x & (m&-m - 1)
				j += bits.TrailingZeros64(m) >> 3
				break
			}
			seen |= x
			j += 8
		}
		if j+8 > len(b) {
			for j < len(b) && strSafe[b[j]] {
				seen |= uint64(b[j]) << 56
				j++
			}
			if j == len(b) {
				return j, fl, badString | truncated
			}
		}
		switch c := b[j]; {
		case c == '"':
			if seen&0x8080808080808080 != 0 {
				fl |= NonASCII
			}
			return j + 1, fl, OK
		case c == '\\':
			fl |= Escaped
			if j+1 >= len(b) {
				return j, fl, badString | truncated
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for k := j + 2; k < j+6; k++ {
					if k >= len(b) {
						return j, fl, badUnicodeEscape | truncated
					}
					if !isHex(b[k]) {
						return j, fl, badUnicodeEscape
					}
				}
				j += 6
			default:
				return j, fl, badEscape
			}
		default:
			return j, fl, badControl
		}
	}
}

// strSafe marks the bytes that stand for themselves in a JSON string: all
// but the quote, the backslash and control characters.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// special has the high bit of each byte of x that is a quote, a backslash
// or a control character set. Its lowest set bit is exact (the first such
// byte); bits above it may also be set for other bytes (a borrow).
func special(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, bs := x^(lo*'"'), x^(lo*'\\')
	return ((q-lo)&^q | (bs-lo)&^bs | (x-lo*0x20)&^x) & hi
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Literal scans true, false or null at b[i] (its first byte one of t, f,
// n).
func Literal(b []byte, i int) (int, Status) {
	lit := "null"
	switch b[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	}
	if len(b)-i < len(lit) {
		if string(b[i:]) == lit[:len(b)-i] {
			return i, badLiteral | truncated
		}
		return i, badLiteral
	}
	if string(b[i:i+len(lit)]) != lit {
		return i, badLiteral
	}
	return i + len(lit), OK
}

// Number scans the number at b[i],
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and reports whether it
// is an integer (no fraction, no exponent). What follows it is for the
// caller to check; one that ends at len(b) may go on in more input.
func Number(b []byte, i int) (int, bool, Status) {
	j := i
	if b[j] == '-' {
		j++
	} else if !isDigit(b[j]) {
		return i, false, badValue
	}
	switch {
	case j >= len(b):
		return j, false, badNumber | truncated
	case b[j] == '0':
		j++
	case isDigit(b[j]):
		for j++; j < len(b) && isDigit(b[j]); j++ {
		}
	default:
		return j, false, badNumber
	}
	isInt := true
	if j < len(b) && b[j] == '.' {
		isInt = false
		j++
		k := j
		for ; j < len(b) && isDigit(b[j]); j++ {
		}
		if j == k {
			return j, false, badFraction | truncatedIf(j == len(b))
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		isInt = false
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := j
		for ; j < len(b) && isDigit(b[j]); j++ {
		}
		if j == k {
			return j, false, badExponent | truncatedIf(j == len(b))
		}
	}
	return j, isInt, OK
}

func truncatedIf(end bool) Status {
	if end {
		return truncated
	}
	return 0
}

// AppendString appends the decoded text of s, a string's contents as
// String validated them (without the quotes), as encoding/json decodes
// it: escapes decoded, each byte of invalid UTF-8 and each lone surrogate
// escape replaced by U+FFFD.
func AppendString(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

// hex4 decodes the 4 hex digits at s[0:4] (validated by String; -1 if
// there are fewer or they are not hex).
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

package jsonscan

import "bytes"

// Scanner scans objects and arrays. It keeps the open containers of Value
// (a bit each, MaxDepth of them) and the white space it skipped; a builder
// keeps one and reuses it. The zero Scanner is ready.
type Scanner struct {
	// OneLine makes a newline in white space an error (NDJSON: a value
	// on one line).
	OneLine bool
	// Space counts the bytes of white space skipped (inside values, and
	// around keys and separators); a caller resets it as it likes.
	Space int
	stack [MaxDepth/64 + 1]uint64 // bit set: an object, clear: an array
}

// spaceAt reports whether white space starts at b[i]. Most JSON has none
// between tokens: callers skip it (skipSpace) only when it does.
func spaceAt(b []byte, i int) bool { return i < len(b) && space[b[i]] }

// skipSpace skips the white space from b[i], counting it.
func (s *Scanner) skipSpace(b []byte, i int) (int, Status) {
	j := SkipSpace(b, i)
	if s.OneLine {
		if k := bytes.IndexByte(b[i:j], '\n'); k >= 0 {
			return i + k, newline
		}
	}
	s.Space += j - i
	return j, OK
}

// Open skips the white space after the '{' or '[' at b[i] and reports
// whether the container is empty (then the offset is after its close).
func (s *Scanner) Open(b []byte, i int) (int, bool, Status) {
	c, j := b[i], i+1
	if spaceAt(b, j) {
		var st Status
		if j, st = s.skipSpace(b, j); st != OK {
			return j, false, st
		}
	}
	if j >= len(b) {
		if c == '{' {
			return j, false, badKey | truncated
		}
		return j, false, badValue | truncated
	}
	if b[j] == c+2 { // '}' or ']'
		return j + 1, true, OK
	}
	return j, false, OK
}

// Key scans an object's key at b[i] and the colon and white space after
// it: it returns the offset after the key's closing quote (the key is
// b[i:end]), its flags, and the offset of the value. With a Status other
// than OK, end is the offset of the problem.
func (s *Scanner) Key(b []byte, i int) (end, value int, fl Flags, st Status) {
	_, end, value, fl, _, st = s.member(b, i, false)
	return end, value, fl, st
}

// NextKey goes on from b[i], the end of an object member's value, to the
// next member's value: it skips the comma and the next key and colon, and
// white space around them. It is Next and then Key in one step, the step
// taken once per member of every object. With more true, the key is
// b[key:end] (its quotes included), with flags fl, and its value is at
// value. With more false, the object ended: end is the offset after its
// closing brace. With a Status other than OK, end is the offset of the
// problem.
func (s *Scanner) NextKey(b []byte, i int) (key, end, value int, fl Flags, more bool, st Status) {
	return s.member(b, i, true)
}

// member is Key (next false: the key is at b[i]) and NextKey (next true:
// b[i] follows a member's value).
func (s *Scanner) member(b []byte, i int, next bool) (key, end, value int, fl Flags, more bool, st Status) {
	if next {
		switch {
		case i+1 < len(b) && b[i] == ',' && b[i+1] == '"': // the usual case
			i++
		case i < len(b) && b[i] == '}':
			return 0, i + 1, 0, 0, false, OK
		default:
			var ok bool
			if i, ok, st = s.next(b, i, true); st != OK || !ok {
				return 0, i, 0, 0, false, st
			}
		}
	}
	if i >= len(b) || b[i] != '"' {
		return i, i, 0, 0, false, badKey | truncatedIf(i >= len(b))
	}
	if end, fl, st = String(b, i); st != OK {
		return i, end, 0, fl, false, st
	}
	// The usual key: the colon right after it, the value right after that.
	if end+1 < len(b) && b[end] == ':' && !space[b[end+1]] {
		return i, end, end + 1, fl, true, OK
	}
	j := end
	if spaceAt(b, j) {
		if j, st = s.skipSpace(b, j); st != OK {
			return i, j, 0, fl, false, st
		}
	}
	switch {
	case j >= len(b):
		return i, j, 0, fl, false, badColon | truncated
	case b[j] != ':':
		return i, j, 0, fl, false, badColon
	}
	if j++; spaceAt(b, j) {
		if j, st = s.skipSpace(b, j); st != OK {
			return i, j, 0, fl, false, st
		}
	}
	return i, end, j, fl, true, OK
}

// Next skips what follows a member of an object (object true) or an
// element of an array, from b[i]: the comma and white space before the
// next one (more true, at the offset returned), or the close (more false,
// the offset after it).
func (s *Scanner) Next(b []byte, i int, object bool) (int, bool, Status) {
	if i+1 < len(b) && b[i] == ',' && !space[b[i+1]] { // the usual case
		return i + 1, true, OK
	}
	return s.next(b, i, object)
}

func (s *Scanner) next(b []byte, i int, object bool) (int, bool, Status) {
	j, st := i, OK
	if spaceAt(b, j) {
		if j, st = s.skipSpace(b, j); st != OK {
			return j, false, st
		}
	}
	if j >= len(b) {
		if object {
			return j, false, badAfterObjectValue | truncated
		}
		return j, false, badAfterArrayElement | truncated
	}
	switch c := b[j]; {
	case c == ',':
		if j++; spaceAt(b, j) {
			j, st = s.skipSpace(b, j)
		}
		return j, true, st
	case c == '}' && object, c == ']' && !object:
		return j + 1, false, OK
	case object:
		return j, false, badAfterObjectValue
	}
	return j, false, badAfterArrayElement
}

// Value scans the value at b[i] (not white space), inside depth open
// containers, and returns the offset after it. It follows nesting without
// recursion, up to MaxDepth containers in all.
func (s *Scanner) Value(b []byte, i, depth int) (int, Status) {
	base := depth
	var st Status
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return i, badValue | truncated
		}
		switch c := b[i]; c {
		case '{', '[':
			if depth >= MaxDepth {
				return i, TooDeep
			}
			var empty bool
			if i, empty, st = s.Open(b, i); st != OK {
				return i, st
			}
			if empty {
				break
			}
			if c == '{' {
				s.stack[depth>>6] |= 1 << (depth & 63)
				depth++
				var end int
				if _, end, i, _, _, st = s.member(b, i, false); st != OK {
					return end, st
				}
			} else {
				s.stack[depth>>6] &^= 1 << (depth & 63)
				depth++
			}
			continue
		case '"':
			i, _, st = String(b, i)
		case 't', 'f', 'n':
			i, st = Literal(b, i)
		default:
			i, _, st = Number(b, i)
		}
		if st != OK {
			return i, st
		}
		// A value ended at b[i]: close containers, or go on to the next.
		for depth > base {
			var more bool
			if s.stack[(depth-1)>>6]&(1<<((depth-1)&63)) != 0 { // an object
				var end int
				if _, end, i, _, more, st = s.member(b, i, true); st != OK {
					return end, st
				}
				if !more {
					i = end
				}
			} else if i, more, st = s.Next(b, i, false); st != OK {
				return i, st
			}
			if !more {
				depth--
				continue
			}
			break
		}
		if depth == base {
			return i, OK
		}
	}
}

// Valid reports whether b is one JSON value with white space around it,
// as json.Valid does.
func Valid(b []byte) bool {
	var s Scanner
	i := SkipSpace(b, 0)
	i, st := s.Value(b, i, 0)
	if st == OK {
		_, st = End(b, i)
	}
	return st == OK
}

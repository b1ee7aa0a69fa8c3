package compare

import (
	"math"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// typedScalars reports whether a or b is a value whose comparison depends
// on the other side's type: a time.Time or a store.Text.
func typedScalars(a, b any) bool {
	switch a.(type) {
	case time.Time, store.Text:
		return true
	}
	switch b.(type) {
	case time.Time, store.Text:
		return true
	}
	return false
}

// typedEqual compares a and b when typedScalars holds, as Equal
// describes.
func typedEqual(a, b any, tol float64) bool {
	if t, ok := a.(store.Text); ok {
		return textEqual(string(t), b, tol)
	}
	if t, ok := b.(store.Text); ok {
		return textEqual(string(t), a, tol)
	}
	if t, ok := a.(time.Time); ok {
		return timeEqual(t, b, tol)
	}
	return timeEqual(b.(time.Time), a, tol)
}

// textEqual compares untyped text with v, reading the text by v's type.
func textEqual(text string, v any, tol float64) bool {
	switch v := v.(type) {
	case string:
		return text == v
	case store.Text:
		return text == string(v)
	case bool:
		return v && text == "true" || !v && text == "false"
	case time.Time:
		t, ok := parseInstant(text)
		return ok && instantsWithin(v, t, tol)
	case nil, map[string]any, []any:
		return false
	}
	vn, ok := asNumber(v)
	if !ok || !store.IsJSONNumber(text) {
		return false
	}
	tn := number{kind: numDecimal, s: text}
	return numbersEqual(vn, tn) || numbersWithin(vn, tn, tol)
}

// timeEqual compares an instant with v: another time.Time, or RFC 3339
// text.
func timeEqual(t time.Time, v any, tol float64) bool {
	var u time.Time
	switch v := v.(type) {
	case time.Time:
		u = v
	case string:
		var ok bool
		if u, ok = parseInstant(v); !ok {
			return false
		}
	default: // store.Text is textEqual's
		return false
	}
	return instantsWithin(t, u, tol)
}

// parseInstant reads an RFC 3339 timestamp: "2024-05-01T10:00:00Z",
// with any UTC offset ("+14:00", "-12:00", "+05:45") and any number of
// fraction digits up to nanoseconds.
func parseInstant(s string) (time.Time, bool) {
	// Every RFC 3339 text is at least "2006-01-02T15:04:05Z" long, with
	// a T at 10: a cheap test before the parse.
	if len(s) < 20 || s[10] != 'T' {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// instantsWithin reports whether two instants are equal, or at most tol
// seconds apart.
func instantsWithin(a, b time.Time, tol float64) bool {
	if a.Equal(b) {
		return true
	}
	if tol <= 0 || math.IsNaN(tol) {
		return false
	}
	d := a.Sub(b) // saturates: far enough apart is outside any tolerance
	if d < 0 {
		if d = -d; d < 0 { // -minDuration overflows
			return false
		}
	}
	return d.Seconds() <= tol
}

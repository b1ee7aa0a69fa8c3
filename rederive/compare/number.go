package compare

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/auditd/auditd/rederive/store"
)

// scalarsEqual compares two values that are not both maps or both lists
// of one length.
func scalarsEqual(a, b any, tol float64) bool {
	if typedScalars(a, b) {
		return typedEqual(a, b, tol)
	}
	an, aok := asNumber(a)
	bn, bok := asNumber(b)
	if aok || bok {
		return aok && bok && (numbersEqual(an, bn) || numbersWithin(an, bn, tol))
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case string:
		b, ok := b.(string)
		return ok && a == b
	case json.Number: // not a JSON number: its text
		b, ok := b.(json.Number)
		return ok && a == b
	}
	return false
}

// number is a numeric value of any Go type.
type number struct {
	kind numKind
	i    int64
	u    uint64
	f    float64
	s    string // a json.Number's text
}

type numKind uint8

// asNumber returns v as a number, when it is one. A json.Number whose text
// is not a JSON number is not.
func asNumber(v any) (number, bool) {
	switch v := v.(type) {
	case json.Number:
		if !store.IsJSONNumber(string(v)) {
			return number{}, false
		}
		return number{kind: numDecimal, s: string(v)}, true
	case int64:
		return number{kind: numInt, i: v}, true
	case float64:
		return number{kind: numFloat, f: v}, true
	case int:
		return number{kind: numInt, i: int64(v)}, true
	case int32:
		return number{kind: numInt, i: int64(v)}, true
	case int16:
		return number{kind: numInt, i: int64(v)}, true
	case int8:
		return number{kind: numInt, i: int64(v)}, true
	case uint64:
		return number{kind: numUint, u: v}, true
	case uint:
		return number{kind: numUint, u: uint64(v)}, true
	case uint32:
		return number{kind: numUint, u: uint64(v)}, true
	case uint16:
		return number{kind: numUint, u: uint64(v)}, true
	case uint8:
		return number{kind: numUint, u: uint64(v)}, true
	case float32:
		return number{kind: numFloat, f: float64(v)}, true
	}
	return number{}, false
}

// float returns n rounded to the nearest float64.
func (n number) float() float64 {
	switch n.kind {
	case numInt:
		return float64(n.i)
	case numUint:
		return float64(n.u)
	case numFloat:
		return n.f
	}
	f, _ := strconv.ParseFloat(n.s, 64) // out of range: ±Inf or 0, the nearest
	return f
}

// text returns an integer's or a decimal's text.
func (n number) text() string {
	switch n.kind {
	case numInt:
		return strconv.FormatInt(n.i, 10)
	case numUint:
		return strconv.FormatUint(n.u, 10)
	}
	return n.s
}

// numbersEqual compares two numbers by value, as Equal describes.
func numbersEqual(a, b number) bool {
	if a.kind == numFloat || b.kind == numFloat {
		fa, fb := a.float(), b.float()
		return fa == fb || math.IsNaN(fa) && math.IsNaN(fb)
	}
	switch {
	case a.kind == numDecimal && b.kind == numDecimal:
		if a.s == b.s {
			return true
		}
	case a.kind == numDecimal || b.kind == numDecimal:
		// An integer and a decimal: most decimals are plain integers.
		d, n := a, b
		if b.kind == numDecimal {
			d, n = b, a
		}
		if i, ok := plainInt(d.s); ok {
			return n.kind == numInt && n.i == i || n.kind == numUint && i >= 0 && n.u == uint64(i)
		}
	default:
		switch {
		case a.kind == numInt && b.kind == numInt:
			return a.i == b.i
		case a.kind == numUint && b.kind == numUint:
			return a.u == b.u
		case a.kind == numInt:
			return a.i >= 0 && uint64(a.i) == b.u
		default:
			return b.i >= 0 && uint64(b.i) == a.u
		}
	}
	da, aok := parseDecimal(a.text())
	db, bok := parseDecimal(b.text())
	if !aok || !bok {
		// Exponents beyond ±10^15: compare as floats.
		return a.float() == b.float()
	}
	return da.equal(db)
}

// numbersWithin reports whether two numbers differ by at most tol:
// exactly when neither is a float, in float64 arithmetic otherwise.
func numbersWithin(a, b number, tol float64) bool {
	if tol <= 0 || math.IsNaN(tol) {
		return false
	}
	if a.kind == numFloat || b.kind == numFloat {
		return math.Abs(a.float()-b.float()) <= tol
	}
	ra, aok := smallRat(a)
	rb, bok := smallRat(b)
	if !aok || !bok {
		return math.Abs(a.float()-b.float()) <= tol
	}
	// The tolerance as written (0.3, not the float64 nearest 0.3).
	rt, ok := new(big.Rat).SetString(strconv.FormatFloat(tol, 'g', -1, 64))
	if !ok {
		return false
	}
	diff := ra.Sub(ra, rb)
	return diff.Abs(diff).Cmp(rt) <= 0
}

// smallRat returns n as an exact fraction, unless its exponent makes it
// too costly to hold exactly.
func smallRat(n number) (*big.Rat, bool) {
	switch n.kind {
	case numInt:
		return new(big.Rat).SetInt64(n.i), true
	case numUint:
		return new(big.Rat).SetUint64(n.u), true
	}
	d, ok := parseDecimal(n.s)
	if !ok || d.exp > 1000 || d.exp < -1000 {
		return nil, false
	}
	return new(big.Rat).SetString(n.s)
}

// plainInt parses a decimal that is an integer without fraction or
// exponent and fits an int64.
func plainInt(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 || strings.ContainsAny(s, ".eE") {
		return 0, false
	}
	i, err := strconv.ParseInt(s, 10, 64)
	return i, err == nil
}

// decimal is a JSON number's exact value as ±0.d₁d₂…dₙ × 10^exp, with d₁
// and dₙ not zero; n is 0 for zero. The digits are those of intp+frac
// from lo to hi, so parsing allocates nothing.
type decimal struct {
	neg        bool
	intp, frac string
	lo, hi     int
	exp        int64
}

// parseDecimal parses a JSON number (isJSONNumber holds). ok is false
// when its exponent is beyond ±10^15.
func parseDecimal(s string) (d decimal, ok bool) {
	if s != "" && s[0] == '-' {
		d.neg = true
		s = s[1:]
	}
	var e int64
	dot, exp := -1, -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			dot = i
		case 'e', 'E':
			exp = i
		}
	}
	if i := exp; i >= 0 {
		es := s[i+1:]
		s = s[:i]
		neg := false
		if es != "" && (es[0] == '+' || es[0] == '-') {
			neg = es[0] == '-'
			es = es[1:]
		}
		for _, c := range []byte(es) {
			e = e*10 + int64(c-'0')
			if e > 1e15 {
				return d, false
			}
		}
		if neg {
			e = -e
		}
	}
	d.intp = s
	if dot >= 0 {
		d.intp, d.frac = s[:dot], s[dot+1:]
	}
	n := len(d.intp) + len(d.frac)
	for d.lo < n && d.digit(d.lo) == '0' {
		d.lo++
	}
	d.hi = n
	for d.hi > d.lo && d.digit(d.hi-1) == '0' {
		d.hi--
	}
	d.exp = int64(len(d.intp)-d.lo) + e
	return d, true
}

func (d decimal) digit(i int) byte {
	if i < len(d.intp) {
		return d.intp[i]
	}
	return d.frac[i-len(d.intp)]
}

func (d decimal) equal(o decimal) bool {
	n := d.hi - d.lo
	if n != o.hi-o.lo {
		return false
	}
	if n == 0 {
		return true // zero, whatever its sign
	}
	if d.neg != o.neg || d.exp != o.exp {
		return false
	}
	for i := 0; i < n; i++ {
		if d.digit(d.lo+i) != o.digit(o.lo+i) {
			return false
		}
	}
	return true
}

const (
	numInt numKind = iota
	numUint
	numFloat
	numDecimal
)

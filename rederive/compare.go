package rederive

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// CompareConfig says how expected and actual values compare.
type CompareConfig struct {
	// Tolerance allows numbers to differ by up to an absolute amount, per
	// field path ("" for a scalar value, "amount" for a field, "totals.eur"
	// for a nested one, "items.0.qty" for a list element's). Default 0:
	// numbers compare exactly by value (1 equals 1.0).
	Tolerance map[string]float64 `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
	// NullIsMissing treats a null field as equal to an absent one (default
	// false: they differ). It applies to keys as well: an expected key
	// whose value is null matches a key absent from the store, and a
	// store key holding null is not reported as extra.
	NullIsMissing bool `yaml:"null_is_missing,omitempty" json:"null_is_missing,omitempty"`
	// Fields, if set, compares only these fields of map values (dotted
	// paths reach into nested maps: "totals.eur"). Scalar values are
	// compared whole.
	Fields []string `yaml:"fields,omitempty" json:"fields,omitempty"`
	// IgnoreExtra does not report keys in the store that nothing derives.
	IgnoreExtra bool `yaml:"ignore_extra,omitempty" json:"ignore_extra,omitempty"`
}

// DriftKind says how a key drifted.
type DriftKind string

const (
	// DriftMissing is an expected key absent from the store.
	DriftMissing DriftKind = "missing"
	// DriftExtra is a key in the store that nothing derives.
	DriftExtra DriftKind = "extra"
	// DriftMismatch is a key whose stored value differs from the expected
	// one.
	DriftMismatch DriftKind = "mismatch"
)

// FieldDiff is one difference between an expected and an actual value.
type FieldDiff struct {
	// Field is the dotted path of the differing field ("" for the whole
	// value; list elements by index: "items.2").
	Field    string `json:"field"`
	Expected any    `json:"expected"`
	Actual   any    `json:"actual"`
	// Absent is "expected" or "actual" when the field is absent from that
	// side (its value above is then nil), so absent and null stay
	// distinct in a report.
	Absent string `json:"absent,omitempty"`
}

// Drift is one key whose store value is not the expected one.
type Drift struct {
	Kind     DriftKind   `json:"kind"`
	Key      string      `json:"key"`
	Expected any         `json:"expected,omitempty"`
	Actual   any         `json:"actual,omitempty"`
	Fields   []FieldDiff `json:"fields,omitempty"`
}

// CompareStats counts what Compare met. Matched + Missing + Mismatched is
// Keys; Missing + Extra + Mismatched is the number of drifts reported.
type CompareStats struct {
	// Rows is the number of rows read from the store.
	Rows int64 `json:"rows"`
	// Keys is the number of expected keys.
	Keys int64 `json:"keys"`
	// Matched counts the expected keys whose stored value is equal.
	Matched    int64 `json:"matched"`
	Missing    int64 `json:"missing"`
	Mismatched int64 `json:"mismatched"`
	// Extra counts the extra keys reported: 0 with IgnoreExtra.
	Extra int64 `json:"extra"`
}

// Compare reads every row of s and compares it with the expected value of
// its key, calling fn with each drift: mismatches and extra keys in the
// order the store returns them, then missing keys sorted by key. An error
// from fn stops the comparison and is returned as is; so is a done
// context's. A key the store returns twice is an ErrStore error. Compare
// does not modify expected.
func Compare(ctx context.Context, s Store, expected map[string]any, c CompareConfig, fn func(Drift) error) (CompareStats, error) {
	st := CompareStats{Keys: int64(len(expected))}
	// Every key met, to find duplicates and, at the end, the missing keys.
	seen := newKeySet(len(expected))
	var met int64 // expected keys met
	err := s.Scan(ctx, func(r Row) error {
		st.Rows++
		if !seen.add(r.Key) {
			return fmt.Errorf("%w: key %q appears twice", ErrStore, r.Key)
		}
		exp, ok := expected[r.Key]
		if !ok {
			if c.IgnoreExtra || c.NullIsMissing && r.Value == nil {
				return nil
			}
			st.Extra++
			return fn(Drift{Kind: DriftExtra, Key: r.Key, Actual: r.Value})
		}
		met++
		diffs := equal(exp, r.Value, &c)
		if diffs == nil {
			st.Matched++
			return nil
		}
		st.Mismatched++
		return fn(Drift{Kind: DriftMismatch, Key: r.Key, Expected: exp, Actual: r.Value, Fields: diffs})
	})
	if err != nil {
		return st, err
	}
	if met == int64(len(expected)) {
		return st, nil
	}
	var missing []string
	for k, v := range expected {
		if seen.has(k) {
			continue
		}
		if c.NullIsMissing && v == nil {
			st.Matched++
			continue
		}
		missing = append(missing, k)
	}
	slices.Sort(missing)
	for i, k := range missing {
		if i&1023 == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
		st.Missing++
		if err := fn(Drift{Kind: DriftMissing, Key: k, Expected: expected[k]}); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Equal compares an expected value with an actual one and returns their
// differences, nil when they are equal.
//
// Values are JSON-like: nil, bool, string, numbers, []any, map[string]any
// (other types are compared through their JSON encoding). Numbers compare
// by value whatever their Go type: int64, uint64, json.Number and the other
// integer types exactly (json.Number "12.50" equals 12.5 and "1250e-2";
// "1" equals 1), and a float64 equals another number when that number,
// rounded to the nearest float64, is the same float (so 0.1 equals
// json.Number "0.1"; a float32 is first widened to float64); NaN equals
// NaN. A tolerance set for the field's path allows a difference up to it,
// computed exactly between integers and decimals (the tolerance taken as
// its shortest decimal text, so 0.3 is 3/10) and in float64 when a float
// is involved. A string is never a number: "1"
// differs from 1. Maps compare field by field (only c.Fields when set), and
// maps and lists nested in them recursively; each differing field is
// reported by its dotted path, a list of another length as a whole.
func Equal(expected, actual any, c CompareConfig) []FieldDiff {
	// The common case, two equal scalars, allocates nothing: c escapes
	// only as its copy in the other case.
	if sameScalar(expected, actual, &c) {
		return nil
	}
	cc := c
	return diff(expected, actual, &cc)
}

func equal(expected, actual any, c *CompareConfig) []FieldDiff {
	if sameScalar(expected, actual, c) {
		return nil
	}
	return diff(expected, actual, c)
}

// diff returns the differences of two values.
func diff(expected, actual any, c *CompareConfig) []FieldDiff {
	d := differ{c: c}
	if len(c.Fields) > 0 {
		em, eok := asMap(expected)
		am, aok := asMap(actual)
		if eok || aok {
			for _, f := range c.Fields {
				ev, ein := lookupField(em, f)
				av, ain := lookupField(am, f)
				d.compare(f, ev, ein, av, ain)
			}
			return d.diffs
		}
	}
	d.compare("", expected, true, actual, true)
	return d.diffs
}

// sameScalar reports whether a and b are equal scalars, cheaply.
func sameScalar(a, b any, c *CompareConfig) bool {
	switch a := a.(type) {
	case json.Number:
		if b, ok := b.(json.Number); ok && a == b {
			return true
		}
	case string:
		b, ok := b.(string)
		return ok && a == b
	case nil:
		return b == nil
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case map[string]any, []any:
		return false
	}
	an, aok := asNumber(a)
	bn, bok := asNumber(b)
	return aok && bok && (numbersEqual(an, bn) || numbersWithin(an, bn, c.Tolerance[""]))
}

type differ struct {
	c     *CompareConfig
	diffs []FieldDiff
}

func (d *differ) add(path string, exp, act any, absent string) {
	d.diffs = append(d.diffs, FieldDiff{Field: path, Expected: exp, Actual: act, Absent: absent})
}

// compare compares the values at path; eok and aok say whether each side
// has the field at all.
func (d *differ) compare(path string, exp any, eok bool, act any, aok bool) {
	switch {
	case !eok && !aok:
		return
	case !eok:
		if !(d.c.NullIsMissing && act == nil) {
			d.add(path, nil, act, "expected")
		}
		return
	case !aok:
		if !(d.c.NullIsMissing && exp == nil) {
			d.add(path, exp, nil, "actual")
		}
		return
	}
	exp, act = jsonLike(exp), jsonLike(act)
	if em, ok := exp.(map[string]any); ok {
		if am, ok := act.(map[string]any); ok {
			d.maps(path, em, am)
			return
		}
	}
	if el, ok := exp.([]any); ok {
		if al, ok := act.([]any); ok && len(el) == len(al) {
			for i := range el {
				d.compare(joinPath(path, strconv.Itoa(i)), el[i], true, al[i], true)
			}
			return
		}
	}
	if !scalarsEqual(exp, act, d.c.Tolerance[path]) {
		d.add(path, exp, act, "")
	}
}

func (d *differ) maps(path string, em, am map[string]any) {
	keys := make([]string, 0, len(em)+len(am))
	for k := range em {
		keys = append(keys, k)
	}
	for k := range am {
		if _, ok := em[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		ev, eok := em[k]
		av, aok := am[k]
		d.compare(joinPath(path, k), ev, eok, av, aok)
	}
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// asMap returns v as a map, when it is one.
func asMap(v any) (map[string]any, bool) {
	m, ok := jsonLike(v).(map[string]any)
	return m, ok
}

// lookupField finds a field by its dotted path: a key holding dots is
// matched whole before the path is split at a dot.
func lookupField(m map[string]any, path string) (any, bool) {
	if m == nil {
		return nil, false
	}
	if v, ok := m[path]; ok {
		return v, true
	}
	for i := 0; i < len(path); i++ {
		if path[i] != '.' {
			continue
		}
		if sub, ok := asMap(m[path[:i]]); ok {
			if v, ok := lookupField(sub, path[i+1:]); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// jsonLike returns v itself when it is a JSON-like value or a number, and
// otherwise (a []string, a map[string]int64, a struct) the value its JSON
// encoding decodes to, numbers as json.Number.
func jsonLike(v any) any {
	switch v.(type) {
	case nil, bool, string, json.Number, map[string]any, []any,
		int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	j, err := decodeJSON(b)
	if err != nil {
		return v
	}
	return j
}

// scalarsEqual compares two values that are not both maps or both lists
// of one length.
func scalarsEqual(a, b any, tol float64) bool {
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

const (
	numInt numKind = iota
	numUint
	numFloat
	numDecimal
)

// asNumber returns v as a number, when it is one. A json.Number whose text
// is not a JSON number is not.
func asNumber(v any) (number, bool) {
	switch v := v.(type) {
	case json.Number:
		if !isJSONNumber(string(v)) {
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

// keySet is a set of keys held as 127-bit keyed hashes in one flat
// open-addressed table: a lookup or an insert costs one cache miss, the
// table holds no pointers for the garbage collector to scan, and the keys
// themselves are not kept. Two distinct keys collide with probability
// about 2^-127 (with random seeds an input cannot aim at), so for 10^9
// keys about 10^-20: such a collision would make a missing key look
// present or a key look duplicated.
type keySet struct {
	seed1, seed2 maphash.Seed
	// slots are (hash, second hash | 1); a zero second hash is empty.
	slots [][2]uint64
	n     int
}

func newKeySet(hint int) *keySet {
	size := 1024
	for size < 2*hint {
		size <<= 1
	}
	return &keySet{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([][2]uint64, size)}
}

func (s *keySet) hash(k string) [2]uint64 {
	return [2]uint64{maphash.String(s.seed1, k), maphash.String(s.seed2, k) | 1}
}

// add adds k and reports whether it was absent.
func (s *keySet) add(k string) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	if !s.insert(s.hash(k)) {
		return false
	}
	s.n++
	return true
}

func (s *keySet) insert(h [2]uint64) bool {
	mask := uint64(len(s.slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case [2]uint64{}:
			s.slots[i] = h
			return true
		case h:
			return false
		}
	}
}

func (s *keySet) grow() {
	old := s.slots
	s.slots = make([][2]uint64, 2*len(old))
	for _, h := range old {
		if h[1] != 0 {
			s.insert(h)
		}
	}
}

func (s *keySet) has(k string) bool {
	h := s.hash(k)
	mask := uint64(len(s.slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case [2]uint64{}:
			return false
		case h:
			return true
		}
	}
}

// Package compare compares a derivation's expected values with a derived
// store's rows: Compare streams a store against the expected keys and
// reports each Drift (missing, extra, mismatched); Equal compares two
// values field by field. Numbers compare exactly across their forms
// (int64, float64, json.Number decimal text), with optional tolerances;
// timestamps compare as instants; a store's untyped text is read by the
// expected value's type; CheckSchema finds a store column that cannot
// hold the expected values before any row is read.
package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// ErrConfig marks a comparison that is configured wrongly (an unknown
// setting, a store whose columns cannot hold the expected values): no row
// is judged, and no drift is reported.
var ErrConfig = errors.New("compare: configuration")

// ErrSchema marks a schema mismatch: a store column whose type cannot
// hold the expected values (cents in a text column, a timestamp in a date
// column). It wraps ErrConfig.
var ErrSchema = fmt.Errorf("%w: schema mismatch", ErrConfig)

// Config says how expected and actual values compare.
type Config struct {
	// Tolerance allows numbers to differ by up to an absolute amount, per
	// field path ("" for a scalar value, "amount" for a field, "totals.eur"
	// for a nested one, "items.0.qty" for a list element's). Default 0:
	// numbers compare exactly by value (1 equals 1.0). For a timestamp
	// the tolerance is in seconds.
	Tolerance map[string]float64 `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
	// NullIsMissing treats a null field as equal to an absent one (default
	// false: they differ). Unless Deleted is set, it also sets the rule
	// for keys: Deleted "null".
	NullIsMissing bool `yaml:"null_is_missing,omitempty" json:"null_is_missing,omitempty"`
	// Deleted says how the store represents a deleted key, one whose
	// expected value is null (a step that returns null deletes its key):
	//
	//   - "absent" (the default, unless NullIsMissing is set): a deleted key
	//     must be absent from the store; a row for it, even a NULL one, is
	//     a mismatch, and a NULL row for a key nothing derives is extra;
	//   - "null": a deleted key may be absent or a NULL row; a row with a
	//     value is a mismatch, and a NULL row for a key nothing derives is
	//     not drift.
	//
	// A NULL row is a row whose value is null: a single NULL value column,
	// a JSON null, or a row whose value fields are all null.
	Deleted Deleted `yaml:"deleted,omitempty" json:"deleted,omitempty"`
	// Fields, if set, compares only these fields of map values (dotted
	// paths reach into nested maps: "totals.eur"). Scalar values are
	// compared whole.
	Fields []string `yaml:"fields,omitempty" json:"fields,omitempty"`
	// IgnoreExtra does not report keys in the store that nothing derives.
	IgnoreExtra bool `yaml:"ignore_extra,omitempty" json:"ignore_extra,omitempty"`
	// Method says how the store is read: MethodRows ("rows", the
	// default) reads every row; MethodSums ("sums") has a store that can
	// (PostgreSQL) sum a hash of its rows by bucket of key hash where it
	// keeps them, and reads only the rows of the buckets whose sums
	// differ from the expected values'. Both report the same drift; a
	// store that cannot sum is read row by row.
	Method Method `yaml:"method,omitempty" json:"method,omitempty"`
	// Incremental compares, in the daemon's runs between full runs, only
	// the keys whose expected value changed since the last clean
	// comparison (CompareChanged), reading their rows alone. Full runs
	// (every full_interval, and auditd verify) compare every key.
	Incremental bool `yaml:"incremental,omitempty" json:"incremental,omitempty"`
}

// Method is how a comparison reads the store: MethodRows or MethodSums
// ("" is MethodRows).
type Method string

const (
	// MethodRows reads every row of the store.
	MethodRows Method = "rows"
	// MethodSums compares sums over buckets of keys and reads only the
	// rows of the buckets that differ.
	MethodSums Method = "sums"
)

// Deleted is the rule for deleted keys: DeletedAbsent or DeletedNull
// ("" is the default, see Config.Deleted).
type Deleted string

const (
	// DeletedAbsent: a deleted key must be absent from the store.
	DeletedAbsent Deleted = "absent"
	// DeletedNull: a deleted key may be absent or a NULL row.
	DeletedNull Deleted = "null"
)

// Check reports a setting Compare cannot apply, as an ErrConfig error
// naming it.
func (c Config) Check() error {
	switch c.Deleted {
	case "", DeletedAbsent, DeletedNull:
	default:
		return fmt.Errorf("%w: deleted: %q is not a rule (want absent or null)", ErrConfig, c.Deleted)
	}
	switch c.Method {
	case "", MethodRows, MethodSums:
	default:
		return fmt.Errorf("%w: method: %q is not a method (want rows or sums)", ErrConfig, c.Method)
	}
	return nil
}

// deleted returns the rule for deleted keys in effect.
func (c *Config) deleted() Deleted {
	switch {
	case c.Deleted != "":
		return c.Deleted
	case c.NullIsMissing:
		return DeletedNull
	}
	return DeletedAbsent
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
	// distinct in a report. A deleted key the store still holds is a
	// mismatch whose one FieldDiff, for the whole value (Field ""), has
	// Absent "expected".
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

// Stats counts what Compare met. Matched + Missing + Mismatched is
// Keys; Missing + Extra + Mismatched is the number of drifts reported.
type Stats struct {
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
	// Summed counts the expected keys judged equal by a sum over their
	// bucket, without reading their rows (method sums).
	Summed int64 `json:"summed,omitempty"`
	// SumQueries counts the queries that summed buckets in the store.
	SumQueries int64 `json:"sum_queries,omitempty"`
	// Unchanged counts the expected keys an incremental comparison did
	// not read, their values unchanged since the last clean comparison
	// (counted in Matched).
	Unchanged int64 `json:"unchanged,omitempty"`
}

// Compare reads every row of s and compares it with the expected value of
// its key, calling fn with each drift: mismatches and extra keys in the
// order the store returns them, then missing keys sorted by key. A key
// whose expected value is null is deleted, judged by c.Deleted; absent
// from the store it matches.
//
// Before reading a row, Compare checks c (an ErrConfig error) and, when
// the store describes its columns (a Schema method, as PostgreSQL's
// store has), checks them against the expected values with CheckSchema:
// a column that cannot hold them is an ErrSchema error, and no drift is
// reported.
//
// An error from fn stops the comparison and is returned as is; so is a
// done context's. A key the store returns twice is an ErrStore error.
// Compare does not modify expected.
func Compare(ctx context.Context, s store.Store, expected map[string]any, c Config, fn func(Drift) error) (Stats, error) {
	st := Stats{Keys: int64(len(expected))}
	if err := c.Check(); err != nil {
		return st, err
	}
	if sc, ok := s.(schemaStore); ok {
		cols, err := sc.Schema(ctx)
		if err != nil {
			return st, err
		}
		if err := CheckSchema(cols, expected, c); err != nil {
			return st, err
		}
	}
	if c.Method == MethodSums {
		if sm, ok := s.(store.Summer); ok {
			st, err, done := compareSums(ctx, s, sm, expected, c, fn)
			if done {
				return st, err
			}
		}
	}
	return compareRows(ctx, s, expected, c, fn)
}

// compareRows compares every row of s, as Compare describes.
func compareRows(ctx context.Context, s store.Store, expected map[string]any, c Config, fn func(Drift) error) (Stats, error) {
	j := newJudge(expected, &c, fn, len(expected))
	err := s.Scan(ctx, j.row)
	if err != nil {
		return j.st, err
	}
	if j.met == int64(len(expected)) {
		return j.st, nil
	}
	var missing []string
	for k, v := range expected {
		if j.seen.has(k) {
			continue
		}
		if v == nil { // deleted, and absent
			j.st.Matched++
			continue
		}
		missing = append(missing, k)
	}
	return j.st, j.missing(ctx, missing)
}

// judge judges a store's rows against the expected values, counting on
// st and calling fn with each drift.
type judge struct {
	c        *Config
	expected map[string]any
	fn       func(Drift) error
	nullRows bool
	st       Stats
	// Every key met, to find duplicates and, at the end, the missing keys.
	seen *keySet
	met  int64 // expected keys met
}

func newJudge(expected map[string]any, c *Config, fn func(Drift) error, hint int) *judge {
	return &judge{
		c:        c,
		expected: expected,
		fn:       fn,
		nullRows: c.deleted() == DeletedNull,
		st:       Stats{Keys: int64(len(expected))},
		seen:     newKeySet(hint),
	}
}

// row judges one row of the store.
func (j *judge) row(r store.Row) error {
	j.st.Rows++
	if !j.seen.add(r.Key) {
		return fmt.Errorf("%w: key %q appears twice", store.ErrStore, r.Key)
	}
	exp, ok := j.expected[r.Key]
	if !ok {
		if j.c.IgnoreExtra || j.nullRows && isNullRow(r.Value) {
			return nil
		}
		j.st.Extra++
		return j.fn(Drift{Kind: DriftExtra, Key: r.Key, Actual: r.Value})
	}
	j.met++
	var diffs []FieldDiff
	switch {
	case exp != nil:
		diffs = equal(exp, r.Value, j.c)
	case j.nullRows && isNullRow(r.Value):
	case j.nullRows:
		diffs = []FieldDiff{{Actual: r.Value}}
	default: // deleted, and the store must not hold the key
		diffs = []FieldDiff{{Actual: r.Value, Absent: "expected"}}
	}
	if diffs == nil {
		j.st.Matched++
		return nil
	}
	j.st.Mismatched++
	return j.fn(Drift{Kind: DriftMismatch, Key: r.Key, Expected: exp, Actual: r.Value, Fields: diffs})
}

// missing reports keys, expected keys (not deleted) no row had, sorted.
func (j *judge) missing(ctx context.Context, keys []string) error {
	slices.Sort(keys)
	for i, k := range keys {
		if i&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		j.st.Missing++
		if err := j.fn(Drift{Kind: DriftMissing, Key: k, Expected: j.expected[k]}); err != nil {
			return err
		}
	}
	return nil
}

// schemaStore is a store whose rows have typed columns, which it can
// describe without reading a row (PostgreSQL). Errors wrap store.ErrStore.
type schemaStore interface {
	Schema(ctx context.Context) ([]store.Column, error)
}

// isNullRow reports whether a row's value is null: nil, or a map of value
// fields that are all null.
func isNullRow(v any) bool {
	if v == nil {
		return true
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return false
	}
	for _, f := range m {
		if f != nil {
			return false
		}
	}
	return true
}

// Equal compares an expected value with an actual one and returns their
// differences, nil when they are equal.
//
// Values are JSON-like: nil, bool, string, numbers, []any, map[string]any,
// and two more a store or a derivation may give: time.Time and
// store.Text (other types are compared through their JSON encoding).
//
// Numbers compare by value whatever their Go type: int64, uint64,
// json.Number and the other integer types exactly (json.Number "12.50"
// equals 12.5 and "1250e-2"; "1" equals 1), and a float64 equals another
// number when that number, rounded to the nearest float64, is the same
// float (so 0.1 equals json.Number "0.1"; a float32 is first widened to
// float64); NaN equals NaN. A tolerance set for the field's path allows a
// difference up to it, computed exactly between integers and decimals (the
// tolerance taken as its shortest decimal text, so 0.3 is 3/10) and in
// float64 when a float is involved. A string is never a number: "1"
// differs from 1.
//
// A time.Time is an instant: it equals another time.Time, or a string or
// store.Text in RFC 3339 ("2024-05-01T23:30:00.5+14:00", any offset, any
// number of fraction digits), that denotes the same instant; a tolerance
// set for its path allows a difference of up to that many seconds. Two
// strings compare as strings, even when both are RFC 3339 timestamps.
//
// A store.Text, untyped text from a store (a CSV cell, a Redis value), is
// read by the type of the value it is compared with: against a string (or
// another Text) it compares as text, exactly; against a number it is a
// number when it is one in the JSON grammar ("1e3" equals 1000, "12.50"
// equals 12.5; "007", "+7", " 7", "0x10" and "NaN" are no numbers and
// equal none); against a bool it must be "true" or "false"; against a
// time.Time it must be RFC 3339 text of the same instant; it never equals
// null, a list or a map.
//
// Maps compare field by field (only c.Fields when set), and maps and
// lists nested in them recursively; each differing field is reported by
// its dotted path, a list of another length as a whole.
func Equal(expected, actual any, c Config) []FieldDiff {
	// The common case, two equal scalars, allocates nothing: c escapes
	// only as its copy in the other case.
	if sameScalar(expected, actual, &c) {
		return nil
	}
	cc := c
	return diff(expected, actual, &cc)
}

func equal(expected, actual any, c *Config) []FieldDiff {
	if sameScalar(expected, actual, c) {
		return nil
	}
	return diff(expected, actual, c)
}

// diff returns the differences of two values.
func diff(expected, actual any, c *Config) []FieldDiff {
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
func sameScalar(a, b any, c *Config) bool {
	if typedScalars(a, b) {
		return typedEqual(a, b, c.Tolerance[""])
	}
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
	c     *Config
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
	case nil, bool, string, json.Number, map[string]any, []any, time.Time, store.Text,
		int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	j, err := store.DecodeJSON(b)
	if err != nil {
		return v
	}
	return j
}

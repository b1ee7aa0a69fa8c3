package compare

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// CheckSchema checks a store's columns (as a store's Schema method
// describes its result) against the expected values, before any row is
// read: it returns an ErrSchema error naming each column that cannot hold
// the values expected in it, with the column's type and the values'.
//
// The values expected in a column follow the rule on store.Row: with one
// value column, the whole expected value; with several, each expected
// object's field of the column's name (only the fields in c.Fields, when
// set). A column of numbers holds numbers; one of text (text, varchar)
// holds strings and timestamps (as RFC 3339 text); one of other strings
// (date, uuid, interval) holds strings; a timestamp column holds
// timestamps and strings; bool, bytea and array columns hold bools, bytes
// (or strings) and lists; json, jsonb and types the store does not know
// hold anything. Several value columns hold objects.
//
// A column is a mismatch only when no expected value in it fits (nulls
// tell nothing), so a derivation whose values are of mixed types is left
// to the row by row comparison, which reports each key that differs.
// The check reads the expected values until every column has met one that
// fits, all of them when one has not.
func CheckSchema(cols []store.Column, expected map[string]any, c Config) error {
	var vals []*columnCheck
	for _, col := range cols {
		if !col.Key {
			vals = append(vals, &columnCheck{col: col})
		}
	}
	if len(vals) == 0 {
		return nil // every row's value is {}
	}
	single := len(vals) == 1
	if !single && len(c.Fields) > 0 {
		vals = slices.DeleteFunc(vals, func(cc *columnCheck) bool { return !slices.Contains(c.Fields, cc.col.Name) })
	}
	open := len(vals)     // columns that have met no fitting value yet
	var shape columnCheck // with several columns: expected values that are no objects
	objects := false
	for k, v := range expected {
		if open == 0 && (single || objects) {
			break
		}
		if single {
			if vals[0].add(k, v) {
				open--
			}
			continue
		}
		m, ok := v.(map[string]any)
		if !ok && v != nil && classOf(v) == classObject {
			m, ok = asMap(v)
		}
		if !ok {
			if v != nil {
				shape.miss(k, v, classOf(v))
			}
			continue
		}
		objects = true
		for _, cc := range vals {
			if cc.add(k, m[cc.col.Name]) {
				open--
			}
		}
	}
	var msgs []string
	if !single && !objects && shape.bad != 0 {
		names := make([]string, 0, len(cols))
		for _, col := range cols {
			if !col.Key {
				names = append(names, col.Name)
			}
		}
		msgs = append(msgs, fmt.Sprintf("the store's rows have %d value columns (%s), read as an object, but the derivation's values are %s (key %q: %s)",
			len(names), strings.Join(names, ", "), shape.bad, shape.key, sample(shape.val)))
	}
	for _, cc := range vals {
		if !cc.fits && cc.bad != 0 {
			msgs = append(msgs, fmt.Sprintf("column %q has type %s, which holds %s, but the derivation's values for it are %s (key %q: %s)",
				cc.col.Name, cc.col.Type, kindValues[cc.col.Kind], cc.bad, cc.key, sample(cc.val)))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; change the store's column type or the derivation's values", ErrSchema, strings.Join(msgs, "; "))
}

// columnCheck is what CheckSchema has met of the values expected in one
// column.
type columnCheck struct {
	col  store.Column
	fits bool       // a value that fits the column was met
	bad  valueClass // the classes of the values that do not
	// The least key whose value does not fit, and that value: the example
	// an error names.
	key string
	val any
}

// add looks at the value k expects in the column and reports whether it
// is the first that fits.
func (cc *columnCheck) add(k string, v any) bool {
	if cc.fits || v == nil {
		return false
	}
	cl := classOf(v)
	if holds(cc.col.Kind, cl) {
		cc.fits = true
		return true
	}
	cc.miss(k, v, cl)
	return false
}

// miss records a value of class cl, at key k, that does not fit.
func (cc *columnCheck) miss(k string, v any, cl valueClass) {
	if cc.bad == 0 || k < cc.key {
		cc.key, cc.val = k, v
	}
	cc.bad |= cl
}

// valueClass is a set of the kinds of expected values.
type valueClass uint8

const (
	classNumber valueClass = 1 << iota
	classString
	classBool
	classTime
	classBytes
	classList
	classObject
	// classOther: a value compared through its JSON encoding (a struct),
	// or untyped text: it may fit any column.
	classOther
)

func (c valueClass) String() string {
	var names []string
	for i, n := range []string{"numbers", "strings", "bools", "timestamps", "bytes", "lists", "objects", "other values"} {
		if c&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, " and ")
}

// kindValues says what values a column kind gives, for messages.
var kindValues = map[store.ColumnKind]string{
	store.ColumnAny:    "any value",
	store.ColumnNumber: "numbers",
	store.ColumnText:   "text",
	store.ColumnString: "strings",
	store.ColumnBool:   "bools",
	store.ColumnTime:   "timestamps",
	store.ColumnBytes:  "bytes",
	store.ColumnList:   "lists",
}

// classOf returns the class of a value that is not nil.
func classOf(v any) valueClass {
	switch v := v.(type) {
	case bool:
		return classBool
	case string:
		return classString
	case time.Time:
		return classTime
	case []byte:
		return classBytes
	case []any:
		return classList
	case map[string]any:
		return classObject
	case store.Text:
		return classOther
	case json.Number:
		if store.IsJSONNumber(string(v)) {
			return classNumber
		}
		return classString
	}
	if _, ok := asNumber(v); ok {
		return classNumber
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Slice, reflect.Array:
		return classList
	case reflect.Map:
		return classObject
	}
	return classOther
}

// holds reports whether a column of kind k can hold a value of class cl.
func holds(k store.ColumnKind, cl valueClass) bool {
	if cl == classOther {
		return true
	}
	switch k {
	case store.ColumnNumber:
		return cl == classNumber
	case store.ColumnText:
		return cl == classString || cl == classTime
	case store.ColumnString:
		return cl == classString
	case store.ColumnBool:
		return cl == classBool
	case store.ColumnTime:
		return cl == classTime || cl == classString
	case store.ColumnBytes:
		return cl == classBytes || cl == classString
	case store.ColumnList:
		return cl == classList
	}
	return true // ColumnAny, or a kind this package does not know
}

// sample renders a value for a message, briefly.
func sample(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

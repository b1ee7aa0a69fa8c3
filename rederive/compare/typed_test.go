package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// TestEqualTyped covers the values whose comparison depends on the other
// side's type: timestamps (time.Time) and untyped text (store.Text). Each
// case is also run with the sides swapped.
func TestEqualTyped(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	txt := func(s string) store.Text { return store.Text(s) }
	diff := func(exp, act any) []FieldDiff { return []FieldDiff{{Expected: exp, Actual: act}} }
	kiritimati := time.FixedZone("", 14*3600)
	kathmandu := time.FixedZone("", 5*3600+45*60)
	baker := time.FixedZone("", -12*3600)
	ts := time.Date(2024, 5, 1, 9, 30, 0, 0, kiritimati) // 2024-04-30T19:30:00Z
	tsNano := time.Date(2024, 5, 1, 9, 30, 0, 500_000_000, kiritimati)
	tol := func(v float64) Config { return Config{Tolerance: map[string]float64{"": v}} }
	for _, tc := range []struct {
		name     string
		exp, act any
		c        Config
		want     []FieldDiff
	}{
		// An instant against an instant or RFC 3339 text, any offset.
		{"time and UTC string", ts, "2024-04-30T19:30:00Z", Config{}, nil},
		{"time and offset string", ts, "2024-05-01T01:15:00+05:45", Config{}, nil},
		{"time and west string", ts, "2024-04-30T07:30:00-12:00", Config{}, nil},
		{"time and trailing zeros", tsNano, "2024-04-30T19:30:00.500000Z", Config{}, nil},
		{"time and time", ts, ts.In(kathmandu), Config{}, nil},
		{"time and time in UTC", ts.In(baker), ts.UTC(), Config{}, nil},
		{"time and text", ts, txt("2024-04-30T19:30:00.000Z"), Config{}, nil},
		{"time one second off", ts, "2024-04-30T19:30:01Z", Config{}, diff(ts, "2024-04-30T19:30:01Z")},
		{"time one nanosecond off", tsNano, "2024-04-30T19:30:00.500000001Z", Config{}, diff(tsNano, "2024-04-30T19:30:00.500000001Z")},
		{"time and times differ", ts, ts.Add(time.Second).In(kathmandu), Config{}, diff(ts, ts.Add(time.Second).In(kathmandu))},
		{"time and a wall clock only", ts, "2024-04-30T19:30:00", Config{}, diff(ts, "2024-04-30T19:30:00")},
		{"time and PostgreSQL's text", ts, "2024-04-30 19:30:00+00", Config{}, diff(ts, "2024-04-30 19:30:00+00")},
		{"time and a date", ts, "2024-04-30", Config{}, diff(ts, "2024-04-30")},
		{"time and a number", ts, n("1714505400"), Config{}, diff(ts, n("1714505400"))},
		{"time and null", ts, nil, Config{}, diff(ts, nil)},
		{"time within tolerance", ts, "2024-04-30T19:30:01Z", tol(1), nil},
		{"time past tolerance", ts, "2024-04-30T19:30:01.5Z", tol(1), diff(ts, "2024-04-30T19:30:01.5Z")},
		{"times far apart", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "9999-12-31T23:59:59Z", tol(1e300), diff(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "9999-12-31T23:59:59Z")},
		{"time in a field", map[string]any{"at": ts, "n": int64(1)}, map[string]any{"at": "2024-04-30T19:30:00Z", "n": n("1")}, Config{}, nil},
		{"time in a field off", map[string]any{"at": ts}, map[string]any{"at": "2024-04-30T19:30:02Z"}, Config{},
			[]FieldDiff{{Field: "at", Expected: ts, Actual: "2024-04-30T19:30:02Z"}}},
		// Two strings stay strings, whatever they look like.
		{"strings that are one instant", "2024-05-01T09:30:00+14:00", "2024-04-30T19:30:00Z", Config{}, diff("2024-05-01T09:30:00+14:00", "2024-04-30T19:30:00Z")},

		// Untyped text, read by the other side's type.
		{"text as a string", "10115", txt("10115"), Config{}, nil},
		{"text with leading zeros as a string", "00123", txt("00123"), Config{}, nil},
		{"text with an exponent as a string", "1e3", txt("1e3"), Config{}, nil},
		{"text with spaces as a string", "  7", txt("  7"), Config{}, nil},
		{"text differs as a string", "10115", txt("10116"), Config{}, diff("10115", txt("10116"))},
		{"text is exact", "abc", txt("abc "), Config{}, diff("abc", txt("abc "))},
		{"text as an integer", int64(10115), txt("10115"), Config{}, nil},
		{"text as a decimal", n("12.50"), txt("12.5"), Config{}, nil},
		{"text as a float", 0.1, txt("0.1"), Config{}, nil},
		{"text with an exponent as a number", int64(1000), txt("1e3"), Config{}, nil},
		{"text big integer", n("9007199254740993"), txt("9007199254740993"), Config{}, nil},
		{"text big integer differs", n("9007199254740993"), txt("9007199254740992"), Config{}, diff(n("9007199254740993"), txt("9007199254740992"))},
		{"text differs as a number", int64(10115), txt("10116"), Config{}, diff(int64(10115), txt("10116"))},
		{"text with leading zeros is no number", int64(7), txt("007"), Config{}, diff(int64(7), txt("007"))},
		{"text with spaces is no number", int64(7), txt("  7"), Config{}, diff(int64(7), txt("  7"))},
		{"text with a plus is no number", int64(7), txt("+7"), Config{}, diff(int64(7), txt("+7"))},
		{"text NaN is no number", int64(0), txt("NaN"), Config{}, diff(int64(0), txt("NaN"))},
		{"text within tolerance", n("1.00"), txt("1.004"), tol(0.005), nil},
		{"text past tolerance", n("1.00"), txt("1.006"), tol(0.005), diff(n("1.00"), txt("1.006"))},
		{"text as true", true, txt("true"), Config{}, nil},
		{"text as false", false, txt("false"), Config{}, nil},
		{"text 1 is no bool", true, txt("1"), Config{}, diff(true, txt("1"))},
		{"text is never null", nil, txt(""), Config{}, diff(nil, txt(""))},
		{"text is no object", map[string]any{"a": "1"}, txt(`{"a":"1"}`), Config{}, diff(map[string]any{"a": "1"}, txt(`{"a":"1"}`))},
		{"text and text", txt("x"), txt("x"), Config{}, nil},
		{"text fields", map[string]any{"zip": "10115", "qty": int64(7), "sku": "00123"},
			map[string]any{"zip": txt("10115"), "qty": txt("7"), "sku": txt("123")}, Config{},
			[]FieldDiff{{Field: "sku", Expected: "00123", Actual: txt("123")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Equal(tc.exp, tc.act, tc.c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Equal(%#v, %#v) =\n %#v\nwant\n %#v", tc.exp, tc.act, got, tc.want)
			}
			var swapped []FieldDiff
			for _, d := range tc.want {
				swapped = append(swapped, FieldDiff{Field: d.Field, Expected: d.Actual, Actual: d.Expected})
			}
			if got := Equal(tc.act, tc.exp, tc.c); !reflect.DeepEqual(got, swapped) {
				t.Errorf("Equal(%#v, %#v) =\n %#v\nwant\n %#v", tc.act, tc.exp, got, swapped)
			}
		})
	}
}

func TestEqualTypedAllocs(t *testing.T) {
	c := Config{}
	ts := time.Date(2024, 4, 30, 19, 30, 0, 0, time.UTC)
	for _, tc := range [][2]any{
		{"10115", store.Text("10115")},
		{int64(10115), store.Text("10115")},
		{json.Number("12.50"), store.Text("12.5")},
		{ts, "2024-04-30T19:30:00Z"},
		{ts, ts},
	} {
		if n := testing.AllocsPerRun(100, func() { Equal(tc[0], tc[1], c) }); n != 0 {
			t.Errorf("Equal(%#v, %#v): %v allocations, want 0", tc[0], tc[1], n)
		}
	}
}

// TestCompareDeleted checks both rules for deleted keys (expected null)
// and the alias NullIsMissing, on every way a store can hold such a key.
func TestCompareDeleted(t *testing.T) {
	expected := map[string]any{
		"live":          "shipped",
		"live-null-row": "shipped",
		"del-absent":    nil,
		"del-null-row":  nil,
		"del-null-cols": nil,
		"del-value":     nil,
	}
	rows := []store.Row{
		{Key: "live", Value: "shipped"},
		{Key: "live-null-row", Value: nil},
		{Key: "del-null-row", Value: nil},
		{Key: "del-null-cols", Value: map[string]any{"status": nil, "at": nil}},
		{Key: "del-value", Value: "paid"},
		{Key: "never-null", Value: nil},
		{Key: "never-value", Value: "paid"},
	}
	absent := []Drift{
		{Kind: DriftMismatch, Key: "live-null-row", Expected: "shipped", Fields: []FieldDiff{{Expected: "shipped"}}},
		{Kind: DriftMismatch, Key: "del-null-row", Fields: []FieldDiff{{Absent: "expected"}}},
		{Kind: DriftMismatch, Key: "del-null-cols", Actual: rows[3].Value, Fields: []FieldDiff{{Actual: rows[3].Value, Absent: "expected"}}},
		{Kind: DriftMismatch, Key: "del-value", Actual: "paid", Fields: []FieldDiff{{Actual: "paid", Absent: "expected"}}},
		{Kind: DriftExtra, Key: "never-null"},
		{Kind: DriftExtra, Key: "never-value", Actual: "paid"},
	}
	null := []Drift{
		{Kind: DriftMismatch, Key: "live-null-row", Expected: "shipped", Fields: []FieldDiff{{Expected: "shipped"}}},
		{Kind: DriftMismatch, Key: "del-value", Actual: "paid", Fields: []FieldDiff{{Actual: "paid"}}},
		{Kind: DriftExtra, Key: "never-value", Actual: "paid"},
	}
	for _, tc := range []struct {
		name  string
		c     Config
		want  []Drift
		stats Stats
	}{
		{"default is absent", Config{}, absent, Stats{Rows: 7, Keys: 6, Matched: 2, Mismatched: 4, Extra: 2}},
		{"absent", Config{Deleted: DeletedAbsent}, absent, Stats{Rows: 7, Keys: 6, Matched: 2, Mismatched: 4, Extra: 2}},
		{"absent wins over null_is_missing", Config{Deleted: DeletedAbsent, NullIsMissing: true}, absent, Stats{Rows: 7, Keys: 6, Matched: 2, Mismatched: 4, Extra: 2}},
		{"null", Config{Deleted: DeletedNull}, null, Stats{Rows: 7, Keys: 6, Matched: 4, Mismatched: 2, Extra: 1}},
		{"null_is_missing is null", Config{NullIsMissing: true}, null, Stats{Rows: 7, Keys: 6, Matched: 4, Mismatched: 2, Extra: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Drift
			st, err := Compare(context.Background(), &compareTestStore{rows: rows}, expected, tc.c, func(d Drift) error {
				got = append(got, d)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("drifts:\n%s\nwant\n%s", compareTestJSON(got), compareTestJSON(tc.want))
			}
			if st != tc.stats {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}

	_, err := Compare(context.Background(), &compareTestStore{rows: rows}, expected, Config{Deleted: "tombstone"}, func(Drift) error {
		t.Fatal("a drift reported under an unknown rule")
		return nil
	})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"tombstone"`) {
		t.Errorf("unknown rule: err %v, want an ErrConfig error naming it", err)
	}
}

// schemaTestStore is a compareTestStore that describes its columns.
type schemaTestStore struct {
	compareTestStore
	cols []store.Column
	err  error
}

func (s *schemaTestStore) Schema(context.Context) ([]store.Column, error) { return s.cols, s.err }

var _ schemaStore = (*schemaTestStore)(nil)

func TestCheckSchema(t *testing.T) {
	key := store.Column{Name: "id", Type: "text", Kind: store.ColumnText, Key: true}
	col := func(name, typ string, kind store.ColumnKind) store.Column {
		return store.Column{Name: name, Type: typ, Kind: kind}
	}
	ts := time.Date(2024, 4, 30, 19, 30, 0, 0, time.UTC)
	many := func(v func(i int) any) map[string]any {
		m := make(map[string]any)
		for i := range 2000 {
			m[fmt.Sprintf("acct-%05d", i)] = v(i)
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		cols     []store.Column
		expected map[string]any
		c        Config
		want     []string // in the error; none: no error
	}{
		{"cents as text", []store.Column{key, col("cents", "text", store.ColumnText)}, many(func(i int) any { return int64(i) }), Config{},
			[]string{`column "cents" has type text`, "numbers"}},
		{"cents as numeric", []store.Column{key, col("cents", "numeric", store.ColumnNumber)}, many(func(i int) any { return int64(i) }), Config{}, nil},
		{"skus as bigint", []store.Column{key, col("sku", "int8", store.ColumnNumber)}, many(func(i int) any { return "00123" }), Config{},
			[]string{`column "sku" has type int8`, "strings"}},
		{"skus as text", []store.Column{key, col("sku", "text", store.ColumnText)}, many(func(i int) any { return "00123" }), Config{}, nil},
		{"timestamps as date", []store.Column{key, col("at", "date", store.ColumnString)}, many(func(i int) any { return ts }), Config{},
			[]string{`column "at" has type date`, "timestamps"}},
		{"timestamps as timestamptz", []store.Column{key, col("at", "timestamptz", store.ColumnTime)}, many(func(i int) any { return ts }), Config{}, nil},
		{"timestamps as text", []store.Column{key, col("at", "text", store.ColumnText)}, many(func(i int) any { return ts }), Config{}, nil},
		{"bools as text", []store.Column{key, col("ok", "text", store.ColumnText)}, many(func(i int) any { return true }), Config{},
			[]string{`column "ok" has type text`, "bools"}},
		{"objects in jsonb", []store.Column{key, col("v", "jsonb", store.ColumnAny)}, many(func(i int) any { return map[string]any{"a": int64(i)} }), Config{}, nil},
		{"objects in text", []store.Column{key, col("v", "text", store.ColumnText)}, many(func(i int) any { return map[string]any{"a": int64(i)} }), Config{},
			[]string{`column "v" has type text`, "objects"}},
		{"all null", []store.Column{key, col("cents", "text", store.ColumnText)}, many(func(i int) any { return nil }), Config{}, nil},
		{"mixed types", []store.Column{key, col("v", "text", store.ColumnText)}, many(func(i int) any {
			if i == 1999 {
				return "x"
			}
			return int64(i)
		}), Config{}, nil},
		{"fields of objects", []store.Column{col("total", "text", store.ColumnText), key, col("n", "int4", store.ColumnNumber), col("at", "timestamptz", store.ColumnTime)},
			many(func(i int) any { return map[string]any{"total": json.Number("1.50"), "n": int64(i), "at": ts} }), Config{},
			[]string{`column "total" has type text`, "numbers"}},
		{"fields not compared", []store.Column{key, col("total", "text", store.ColumnText), col("n", "int4", store.ColumnNumber)},
			many(func(i int) any { return map[string]any{"total": json.Number("1.50"), "n": int64(i)} }), Config{Fields: []string{"n"}}, nil},
		{"two columns and several bad", []store.Column{key, col("total", "text", store.ColumnText), col("n", "text", store.ColumnText)},
			many(func(i int) any { return map[string]any{"total": 1.5, "n": int64(i)} }), Config{},
			[]string{`column "total" has type text`, `column "n" has type text`}},
		{"scalars for several columns", []store.Column{key, col("a", "int8", store.ColumnNumber), col("b", "int8", store.ColumnNumber)},
			many(func(i int) any { return int64(i) }), Config{}, []string{"2 value columns (a, b)", "numbers"}},
		{"typed values", []store.Column{key, col("v", "_int4", store.ColumnList)}, many(func(i int) any { return []int64{1} }), Config{}, nil},
		{"key only", []store.Column{key}, many(func(i int) any { return int64(i) }), Config{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSchema(tc.cols, tc.expected, tc.c)
			t.Log(err)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("CheckSchema: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrSchema) || !errors.Is(err, ErrConfig) {
				t.Fatalf("CheckSchema = %v, want an ErrSchema error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// The message is the same whatever the map's order.
			for range 5 {
				if again := CheckSchema(tc.cols, tc.expected, tc.c); again.Error() != err.Error() {
					t.Fatalf("CheckSchema again:\n%v\nfirst:\n%v", again, err)
				}
			}
		})
	}

	// Compare checks a store that describes its columns before any row.
	s := &schemaTestStore{
		compareTestStore: compareTestStore{rows: []store.Row{{Key: "a", Value: store.Text("1")}}},
		cols:             []store.Column{key, col("cents", "text", store.ColumnText)},
	}
	expected := map[string]any{"a": int64(2), "b": int64(3)}
	st, err := Compare(context.Background(), s, expected, Config{}, func(d Drift) error {
		t.Errorf("drift %+v reported with a schema mismatch", d)
		return nil
	})
	if !errors.Is(err, ErrSchema) || st.Rows != 0 {
		t.Errorf("Compare = %+v, %v; want no row read and an ErrSchema error", st, err)
	}
	s.err = store.ErrStore
	if _, err := Compare(context.Background(), s, expected, Config{}, func(Drift) error { return nil }); err != store.ErrStore {
		t.Errorf("Compare with Schema failing: err %v, want %v", err, store.ErrStore)
	}
}

// FuzzEqualText compares arbitrary untyped text with values of each type:
// never a panic, the same verdict with the sides swapped, and the text
// always equal to itself as a string, to its number when it is a JSON
// number, and to its instant when it is RFC 3339.
func FuzzEqualText(f *testing.F) {
	for _, s := range []string{"10115", "007", "1e3", "  7", "12.50", "-0", "true", "", "NaN",
		"2024-04-30T19:30:00Z", "2024-05-01T09:30:00.5+14:00", "2024-04-30 19:30:00"} {
		f.Add(s)
	}
	ts := time.Date(2024, 4, 30, 19, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		tx := store.Text(s)
		if d := Equal(s, tx, Config{}); d != nil {
			t.Fatalf("text %q differs from the same string: %v", s, d)
		}
		for _, v := range []any{json.Number("1000"), int64(7), 12.5, uint64(1), true, false, ts, nil, "x", map[string]any{}, []any{}} {
			if a, b := Equal(v, tx, Config{}) == nil, Equal(tx, v, Config{}) == nil; a != b {
				t.Fatalf("Equal(%#v, %q) = %v, swapped %v", v, s, a, b)
			}
		}
		if store.IsJSONNumber(s) {
			if d := Equal(json.Number(s), tx, Config{}); d != nil {
				t.Fatalf("text %q differs from its number: %v", s, d)
			}
		}
		if tm, ok := parseInstant(s); ok {
			if d := Equal(tm, tx, Config{}); d != nil {
				t.Fatalf("text %q differs from its instant: %v", s, d)
			}
			if d := Equal(tm.UTC(), s, Config{}); d != nil {
				t.Fatalf("string %q differs from its instant: %v", s, d)
			}
		}
	})
}

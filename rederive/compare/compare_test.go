package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/auditd/auditd/rederive/store"
)

func TestEqual(t *testing.T) {
	point1 := 0.1 // 0.1 + 0.2 in constants is exactly 0.3
	sum := point1 + 0.2
	n := func(s string) json.Number { return json.Number(s) }
	diff := func(field string, exp, act any) []FieldDiff {
		return []FieldDiff{{Field: field, Expected: exp, Actual: act}}
	}
	for _, tc := range []struct {
		name     string
		exp, act any
		c        Config
		want     []FieldDiff
	}{
		// Numbers by value, across representations.
		{"int and float", int64(1), 1.0, Config{}, nil},
		{"int and decimal", int64(1), n("1.0"), Config{}, nil},
		{"decimal trailing zeros", n("12.50"), n("12.5"), Config{}, nil},
		{"decimal and float", n("12.50"), 12.5, Config{}, nil},
		{"decimal 0.1 and float 0.1", n("0.1"), 0.1, Config{}, nil},
		{"exponent", n("1.25e3"), int64(1250), Config{}, nil},
		{"exponent forms", n("125E1"), n("0.0125e5"), Config{}, nil},
		{"zeros", n("-0"), n("0.000e7"), Config{}, nil},
		{"negative zero float", math.Copysign(0, -1), int64(0), Config{}, nil},
		{"int types", int32(-7), n("-7"), Config{}, nil},
		{"uint and int", uint64(7), int64(7), Config{}, nil},
		{"uint and negative int", uint64(math.MaxUint64), int64(-1), Config{}, diff("", uint64(math.MaxUint64), int64(-1))},
		{"big uint and decimal", uint64(math.MaxUint64), n("18446744073709551615"), Config{}, nil},
		{"large ints exactly", n("9007199254740993"), int64(9007199254740993), Config{}, nil},
		{"large ints differ", n("9007199254740993"), n("9007199254740992"), Config{}, diff("", n("9007199254740993"), n("9007199254740992"))},
		{"decimals past int64", n("123456789012345678901234567890.5"), n("123456789012345678901234567890.50"), Config{}, nil},
		{"decimals past int64 differ", n("123456789012345678901234567890.5"), n("123456789012345678901234567890.6"), Config{}, diff("", n("123456789012345678901234567890.5"), n("123456789012345678901234567890.6"))},
		{"float rounds the decimal", 9007199254740992.0, n("9007199254740993"), Config{}, nil},
		{"float sum is no decimal", sum, n("0.3"), Config{}, diff("", sum, n("0.3"))},
		{"decimal differs", n("12.50"), n("12.51"), Config{}, diff("", n("12.50"), n("12.51"))},
		{"NaN", math.NaN(), math.NaN(), Config{}, nil},
		{"huge exponents", n("1e999999999999999999"), n("1e999999999999999999"), Config{}, nil},
		{"huge exponents differ", n("1e999999999999999999"), n("-1e999999999999999999"), Config{}, diff("", n("1e999999999999999999"), n("-1e999999999999999999"))},

		// Tolerance, absolute, per field path.
		{"tolerance float", sum, n("0.3"), Config{Tolerance: map[string]float64{"": 1e-9}}, nil},
		{"tolerance decimal edge", n("12.50"), n("12.51"), Config{Tolerance: map[string]float64{"": 0.01}}, nil},
		{"tolerance as written", n("1.0"), n("1.3"), Config{Tolerance: map[string]float64{"": 0.3}}, nil},
		{"tolerance exceeded", n("12.50"), n("12.52"), Config{Tolerance: map[string]float64{"": 0.01}}, diff("", n("12.50"), n("12.52"))},
		{"tolerance other field", map[string]any{"a": n("1"), "b": n("1")}, map[string]any{"a": n("1.5"), "b": n("1.5")},
			Config{Tolerance: map[string]float64{"a": 0.5}}, diff("b", n("1"), n("1.5"))},
		{"tolerance nested", map[string]any{"t": map[string]any{"eur": 10.0}}, map[string]any{"t": map[string]any{"eur": n("10.004")}},
			Config{Tolerance: map[string]float64{"t.eur": 0.005}}, nil},
		{"tolerance never for strings", "1", "1.001", Config{Tolerance: map[string]float64{"": 1}}, diff("", "1", "1.001")},

		// A string is not a number.
		{"string vs number", "1", int64(1), Config{}, diff("", "1", int64(1))},
		{"number vs string", n("12.50"), "12.50", Config{}, diff("", n("12.50"), "12.50")},
		{"strings exactly", "abc", "abc ", Config{}, diff("", "abc", "abc ")},
		{"bools", true, false, Config{}, diff("", true, false)},
		{"bool vs string", true, "true", Config{}, diff("", true, "true")},

		// Null and missing.
		{"null vs absent", map[string]any{"a": n("1"), "b": nil}, map[string]any{"a": n("1")}, Config{},
			[]FieldDiff{{Field: "b", Absent: "actual"}}},
		{"absent vs null", map[string]any{"a": n("1")}, map[string]any{"a": n("1"), "b": nil}, Config{},
			[]FieldDiff{{Field: "b", Absent: "expected"}}},
		{"null is missing", map[string]any{"a": n("1"), "b": nil}, map[string]any{"a": n("1")}, Config{NullIsMissing: true}, nil},
		{"missing is null", map[string]any{"a": n("1")}, map[string]any{"a": n("1"), "b": nil}, Config{NullIsMissing: true}, nil},
		{"absent value field", map[string]any{"a": n("1"), "b": n("2")}, map[string]any{"a": n("1")}, Config{NullIsMissing: true},
			[]FieldDiff{{Field: "b", Expected: n("2"), Absent: "actual"}}},
		{"null vs value", nil, n("0"), Config{NullIsMissing: true}, diff("", nil, n("0"))},

		// Maps field by field, nested paths, lists.
		{"fields sorted", map[string]any{"b": "x", "a": "y", "c": "z"}, map[string]any{"a": "Y", "b": "X", "c": "z"}, Config{},
			[]FieldDiff{{Field: "a", Expected: "y", Actual: "Y"}, {Field: "b", Expected: "x", Actual: "X"}}},
		{"nested", map[string]any{"t": map[string]any{"eur": n("1"), "usd": n("2")}, "l": []any{"a", map[string]any{"q": n("1")}}},
			map[string]any{"t": map[string]any{"eur": n("1"), "usd": n("3")}, "l": []any{"a", map[string]any{"q": n("2")}}}, Config{},
			[]FieldDiff{{Field: "l.1.q", Expected: n("1"), Actual: n("2")}, {Field: "t.usd", Expected: n("2"), Actual: n("3")}}},
		{"list length", []any{n("1")}, []any{n("1"), n("2")}, Config{}, diff("", []any{n("1")}, []any{n("1"), n("2")})},
		{"map vs scalar", map[string]any{"a": n("1")}, n("1"), Config{}, diff("", map[string]any{"a": n("1")}, n("1"))},
		{"only fields", map[string]any{"a": n("1"), "b": n("2"), "t": map[string]any{"eur": n("5"), "usd": n("1")}},
			map[string]any{"a": n("1"), "b": n("9"), "t": map[string]any{"eur": n("5"), "usd": n("7")}, "x": true},
			Config{Fields: []string{"a", "t.eur"}}, nil},
		{"only fields differ", map[string]any{"a": n("1"), "b": n("2")}, map[string]any{"a": n("2"), "b": n("2")},
			Config{Fields: []string{"b", "a", "c"}}, diff("a", n("1"), n("2"))},
		{"fields on scalars", n("1"), n("1.0"), Config{Fields: []string{"a"}}, nil},
		{"dotted key", map[string]any{"a.b": n("1")}, map[string]any{"a.b": n("1")}, Config{Fields: []string{"a.b"}}, nil},

		// Go values that are not JSON-like compare by their JSON.
		{"typed slice", []string{"a", "b"}, []any{"a", "b"}, Config{}, nil},
		{"typed map", map[string]any{"m": map[string]int64{"x": 1}}, map[string]any{"m": map[string]any{"x": n("1.0")}}, Config{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Equal(tc.exp, tc.act, tc.c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Equal(%#v, %#v) =\n %#v\nwant\n %#v", tc.exp, tc.act, got, tc.want)
			}
			// Symmetric, the sides swapped.
			var swapped []FieldDiff
			for _, d := range tc.want {
				s := FieldDiff{Field: d.Field, Expected: d.Actual, Actual: d.Expected}
				switch d.Absent {
				case "actual":
					s.Absent = "expected"
				case "expected":
					s.Absent = "actual"
				}
				swapped = append(swapped, s)
			}
			if got := Equal(tc.act, tc.exp, tc.c); !reflect.DeepEqual(got, swapped) {
				t.Errorf("Equal(%#v, %#v) =\n %#v\nwant\n %#v", tc.act, tc.exp, got, swapped)
			}
		})
	}
}

func TestEqualAllocs(t *testing.T) {
	c := Config{}
	for _, tc := range [][2]any{
		{json.Number("12.50"), json.Number("12.50")},
		{json.Number("12.50"), json.Number("12.5")},
		{int64(12), json.Number("12")},
		{12.5, json.Number("12.50")},
		{"x", "x"},
	} {
		if n := testing.AllocsPerRun(100, func() { Equal(tc[0], tc[1], c) }); n != 0 {
			t.Errorf("Equal(%#v, %#v): %v allocations, want 0", tc[0], tc[1], n)
		}
	}
}

// compareTestStore is a Store of rows in memory, with a failure hook.
type compareTestStore struct {
	rows []store.Row
	// err, if set, is returned after the rows.
	err error
}

var _ store.Store = (*compareTestStore)(nil)

func (s *compareTestStore) Scan(ctx context.Context, fn func(store.Row) error) error {
	for _, r := range s.rows {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return s.err
}

func (s *compareTestStore) Watermarks(context.Context) (map[string]uint64, bool, error) {
	return nil, false, nil
}

func (s *compareTestStore) Check(ctx context.Context) error { return ctx.Err() }

func (s *compareTestStore) Close() error { return nil }

func TestCompare(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	expected := map[string]any{
		"a": n("1"),
		"b": map[string]any{"x": n("2"), "y": "s"},
		"c": n("3"),
		"d": nil,
		"e": n("5.0"),
		"f": map[string]any{"x": n("1")},
	}
	rows := []store.Row{
		{Key: "b", Value: map[string]any{"x": n("2.00"), "y": "t"}},
		{Key: "x", Value: n("9")},
		{Key: "a", Value: "1"},
		{Key: "e", Value: 5.0},
		{Key: "n", Value: nil},
		{Key: "f", Value: map[string]any{"x": n("1"), "z": nil}},
	}
	for _, tc := range []struct {
		name  string
		c     Config
		want  []Drift
		stats Stats
	}{
		{"default", Config{}, []Drift{
			{Kind: DriftMismatch, Key: "b", Expected: expected["b"], Actual: rows[0].Value, Fields: []FieldDiff{{Field: "y", Expected: "s", Actual: "t"}}},
			{Kind: DriftExtra, Key: "x", Actual: n("9")},
			{Kind: DriftMismatch, Key: "a", Expected: n("1"), Actual: "1", Fields: []FieldDiff{{Field: "", Expected: n("1"), Actual: "1"}}},
			{Kind: DriftExtra, Key: "n"},
			{Kind: DriftMismatch, Key: "f", Expected: expected["f"], Actual: rows[5].Value, Fields: []FieldDiff{{Field: "z", Absent: "expected"}}},
			{Kind: DriftMissing, Key: "c", Expected: n("3")},
			// d is deleted (null) and absent, as the default rule wants.
		}, Stats{Rows: 6, Keys: 6, Matched: 2, Missing: 1, Mismatched: 3, Extra: 2}},
		{"null is missing, ignore extra, fields", Config{NullIsMissing: true, IgnoreExtra: true, Fields: []string{"x"}}, []Drift{
			{Kind: DriftMismatch, Key: "a", Expected: n("1"), Actual: "1", Fields: []FieldDiff{{Field: "", Expected: n("1"), Actual: "1"}}},
			{Kind: DriftMissing, Key: "c", Expected: n("3")},
		}, Stats{Rows: 6, Keys: 6, Matched: 4, Missing: 1, Mismatched: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprintf("%#v", expected)
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
			if after := fmt.Sprintf("%#v", expected); after != before {
				t.Errorf("Compare modified expected:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func compareTestJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func TestCompareMissingSorted(t *testing.T) {
	expected := make(map[string]any)
	for i := range 5000 {
		expected[fmt.Sprintf("k%05d", i)] = int64(i)
	}
	var keys []string
	st, err := Compare(context.Background(), &compareTestStore{rows: []store.Row{{Key: "k00003", Value: int64(3)}}}, expected, Config{}, func(d Drift) error {
		keys = append(keys, d.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Missing != 4999 || st.Matched != 1 || len(keys) != 4999 {
		t.Fatalf("stats %+v, %d drifts", st, len(keys))
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1] >= keys[i] {
			t.Fatalf("missing keys out of order: %q before %q", keys[i-1], keys[i])
		}
	}
}

func TestCompareErrors(t *testing.T) {
	ctx := context.Background()
	expected := map[string]any{"a": int64(1), "b": int64(2)}
	nop := func(Drift) error { return nil }

	_, err := Compare(ctx, &compareTestStore{rows: []store.Row{{Key: "a", Value: int64(1)}, {Key: "a", Value: int64(1)}}}, expected, Config{}, nop)
	if !errors.Is(err, store.ErrStore) {
		t.Errorf("duplicate key: err %v, want ErrStore", err)
	}

	storeErr := fmt.Errorf("%w: down", store.ErrStore)
	_, err = Compare(ctx, &compareTestStore{rows: []store.Row{{Key: "a", Value: int64(1)}}, err: storeErr}, expected, Config{}, nop)
	if err != storeErr {
		t.Errorf("store error: err %v, want %v", err, storeErr)
	}

	errStop := errors.New("stop")
	calls := 0
	_, err = Compare(ctx, &compareTestStore{rows: []store.Row{{Key: "a", Value: int64(7)}, {Key: "x"}}}, expected, Config{}, func(Drift) error {
		calls++
		return errStop
	})
	if err != errStop || calls != 1 {
		t.Errorf("fn error: err %v after %d calls, want %v after 1", err, calls, errStop)
	}
	calls = 0
	_, err = Compare(ctx, &compareTestStore{}, expected, Config{}, func(Drift) error {
		calls++
		return errStop
	})
	if err != errStop || calls != 1 {
		t.Errorf("fn error on missing: err %v after %d calls, want %v after 1", err, calls, errStop)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Compare(cctx, &compareTestStore{rows: []store.Row{{Key: "a", Value: int64(1)}}}, expected, Config{}, nop)
	if err != context.Canceled {
		t.Errorf("cancelled: err %v, want %v", err, context.Canceled)
	}
}

func FuzzEqualNumbers(f *testing.F) {
	for _, s := range [][2]string{{"12.50", "12.5"}, {"1e3", "1000"}, {"-0", "0"}, {"0.1", "1e-1"}, {"9007199254740993", "9007199254740992"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !store.IsJSONNumber(a) || !store.IsJSONNumber(b) {
			return
		}
		da, aok := parseDecimal(a)
		db, bok := parseDecimal(b)
		if !aok || !bok || da.exp > 1000 || da.exp < -1000 || db.exp > 1000 || db.exp < -1000 {
			return
		}
		ra, _ := smallRat(number{kind: numDecimal, s: a})
		rb, _ := smallRat(number{kind: numDecimal, s: b})
		want := ra.Cmp(rb) == 0
		if got := Equal(json.Number(a), json.Number(b), Config{}) == nil; got != want {
			t.Errorf("Equal(%s, %s) = %v, big.Rat says %v", a, b, got, want)
		}
	})
}

func TestCompareKeySet(t *testing.T) {
	s := newKeySet(0)
	for i := range 10000 { // grows from 1024 slots
		if !s.add(fmt.Sprint(i)) {
			t.Fatalf("add(%d) the first time = false", i)
		}
	}
	for i := range 10000 {
		if s.add(fmt.Sprint(i)) {
			t.Fatalf("add(%d) the second time = true", i)
		}
		if !s.has(fmt.Sprint(i)) || s.has(fmt.Sprint(-i-1)) {
			t.Fatalf("has wrong around %d", i)
		}
	}
	if s.n != 10000 || len(s.slots) < 20000 {
		t.Errorf("%d keys in %d slots", s.n, len(s.slots))
	}
}

func ExampleEqual() {
	expected := map[string]any{"balance": json.Number("12.50"), "currency": "EUR", "count": int64(3)}
	actual := map[string]any{"balance": 12.5, "currency": "eur", "count": json.Number("3")}
	for _, d := range Equal(expected, actual, Config{}) {
		fmt.Printf("%s: expected %v, actual %v\n", d.Field, d.Expected, d.Actual)
	}
	// Output:
	// currency: expected EUR, actual eur
}

func ExampleCompare() {
	s := &compareTestStore{rows: []store.Row{
		{Key: "alice", Value: json.Number("10.00")},
		{Key: "bob", Value: json.Number("7.5")},
		{Key: "mallory", Value: json.Number("1000000")},
	}}
	expected := map[string]any{"alice": int64(10), "bob": json.Number("7.25"), "carol": json.Number("3")}
	st, err := Compare(context.Background(), s, expected, Config{}, func(d Drift) error {
		fmt.Printf("%s %s: expected %v, actual %v\n", d.Kind, d.Key, d.Expected, d.Actual)
		return nil
	})
	fmt.Printf("%+v %v\n", st, err)
	// Output:
	// mismatch bob: expected 7.25, actual 7.5
	// extra mallory: expected <nil>, actual 1000000
	// missing carol: expected 3, actual <nil>
	// {Rows:3 Keys:3 Matched:1 Missing:1 Mismatched:1 Extra:1 Summed:0 SumQueries:0 Unchanged:0} <nil>
}

package celfold

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cel.dev/cel-go/cel"
)

// evalState compiles expr in StateLibrary over the variable x and
// evaluates it with x the CEL value of v (StateValue).
func evalState(t *testing.T, expr string, v any) (any, error) {
	t.Helper()
	env, err := cel.NewEnv(append(StateLibrary(), cel.Variable("x", cel.DynType))...)
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(map[string]any{"x": StateValue(v)})
	if err != nil {
		return nil, err
	}
	return out.Value(), nil
}

// TestStateValue: an exported state reads back with a derivation's
// number rules: a decimal (json.Number, as Export gives it) compares and
// adds as a decimal, exactly, also inside maps and lists; a timestamp is
// a timestamp; ints and doubles are unchanged; text that is no decimal is
// an error, not a string compared as a number.
func TestStateValue(t *testing.T) {
	ts := time.Date(2026, 1, 1, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		expr string
		v    any
		want bool
	}{
		{"x >= 0", json.Number("1000.00"), true},
		{"x >= 0", json.Number("-0.01"), false},
		{`x == decimal("0.3")`, json.Number("0.30"), true},
		{`x + decimal("0.2") == decimal("0.3")`, json.Number("0.1"), true},
		{"x.balance >= x.limit", map[string]any{"balance": json.Number("5.10"), "limit": int64(5)}, true},
		{"x.balance >= x.limit", map[string]any{"balance": json.Number("4.99"), "limit": int64(5)}, false},
		{"x[1] > x[0]", []any{json.Number("1.5"), json.Number("1.50001")}, true},
		{`x == timestamp("2026-01-01T09:30:00Z")`, ts, true},
		{"x == 3", int64(3), true},
		{"x < 1", 0.5, true},
		{`x == "a"`, "a", true},
	} {
		got, err := evalState(t, tc.expr, tc.v)
		if err != nil || got != tc.want {
			t.Errorf("%s over %v: %v, %v; want %v", tc.expr, tc.v, got, err, tc.want)
		}
	}
	if _, err := evalState(t, "x >= 0", json.Number("12abc")); err == nil || !strings.Contains(err.Error(), "decimal") {
		t.Errorf("a json.Number that is no decimal: %v", err)
	}
}

// TestStateSum: sum of ints is an int (an overflow an error), with a
// double or uint a double, with a decimal an exact decimal (where the
// same sum in doubles is off), and a double among decimals an error.
func TestStateSum(t *testing.T) {
	big := int64(1 << 62)
	for _, tc := range []struct {
		expr string
		v    any
		want any // nil: an error containing errText
		errT string
	}{
		{"sum(x)", []any{int64(1), int64(2)}, int64(3), ""},
		{"sum(x)", []any{big, big}, nil, "overflow"},
		{"sum(x)", []any{int64(1), 0.5}, 1.5, ""},
		{"sum(x)", []any{int64(1), uint64(2)}, 3.0, ""},
		{"sum(x)", []any{}, int64(0), ""},
		{`sum(x) == decimal("0")`, []any{json.Number("0.1"), json.Number("0.2"), json.Number("-0.3")}, true, ""},
		{"sum(x) == 0.0", []any{0.1, 0.2, -0.3}, false, ""},
		{`sum(x) == decimal("3.5")`, []any{int64(1), json.Number("2.5"), uint64(0)}, true, ""},
		{"sum(x)", []any{json.Number("1.5"), 0.5}, nil, "double"},
		{"sum(x)", []any{json.Number("1.5"), "a"}, nil, "not a number"},
		{"sum(x)", []any{"a"}, nil, "not a number"},
	} {
		got, err := evalState(t, tc.expr, tc.v)
		if tc.want == nil {
			if err == nil || !strings.Contains(err.Error(), tc.errT) {
				t.Errorf("%s over %v: %v, %v; want an error with %q", tc.expr, tc.v, got, err, tc.errT)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s over %v: %v (%T), %v; want %v", tc.expr, tc.v, got, got, err, tc.want)
		}
	}
	// The sum of decimals is a decimal, not a double near it.
	env, _ := cel.NewEnv(StateLibrary()...)
	ast, iss := env.Compile(`sum([decimal("0.10"), decimal("0.20")])`)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, _ := env.Program(ast)
	out, _, err := prg.Eval(map[string]any{})
	if err != nil || out.Type() != DecimalType || out.(*celDecimal).text() != "0.30" {
		t.Fatalf("sum of decimals: %v (%v), %v", out, out.Type(), err)
	}
}

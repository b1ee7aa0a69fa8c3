package celfold

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// evalCEL evaluates expr in the step environment with state bound to
// state (nil: unbound).
func evalCEL(t testing.TB, expr string, state ref.Val) (ref.Val, error) {
	t.Helper()
	env, err := celEnvsJSON()
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.step.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := env.step.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	if state != nil {
		vars["state"] = state
	}
	out, _, err := prg.Eval(vars)
	return out, err
}

// amounts returns n payloads each carrying amount as a JSON string and as
// a JSON number.
func amounts(n int, amount string) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf(`{"account":"a","text":%q,"number":%s}`, amount, amount)
	}
	return p
}

// TestDecimalSum is the case decimals exist for: 10,000 amounts of 0.10
// sum to exactly 1000.00, exported as the json.Number "1000.00" that
// package compare compares exactly with numeric columns, CSV cells and
// JSON numbers (spec's TestDecimalCompare); the same sum in double is off.
func TestDecimalSum(t *testing.T) {
	payloads := amounts(10_000, "0.10")
	for _, c := range []struct {
		name, initial, step string
		want                any
	}{
		{"decimal of strings", `decimal("0.00")`, `state + decimal(event.text)`, json.Number("1000.00")},
		{"decimal of numbers", `decimal(0)`, `state + decimal(event.number)`, json.Number("1000.0")},
		{"double", `0.0`, `state + event.number`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := celSpec(t, fmt.Sprintf(`
				key: event.account
				initial: '%s'
				step: '%s'`, c.initial, c.step))
			got := celFold(t, d, payloads...)["a"]
			if c.want == nil {
				if f, ok := got.(float64); !ok || f == 1000 {
					t.Fatalf("double sum is %#v: the float error is gone?", got)
				}
				return
			}
			if got != c.want {
				t.Fatalf("sum is %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestDecimalExpressions(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		// Exact arithmetic keeps the scale, as SQL numeric does.
		{`decimal("0.10") + decimal("0.20")`, "0.30"},
		{`decimal("0.1") + decimal("0.2") == decimal("0.3")`, "true"},
		{`decimal("1.10") - decimal("0.1")`, "1.00"},
		{`decimal("1.5") * decimal("1.5")`, "2.25"},
		{`decimal("19.99") * 3`, "59.97"},
		{`decimal("0.10") + 1`, "1.10"},
		{`decimal("0.10") - 1`, "-0.90"},
		{`-decimal("1.5")`, "-1.5"},
		{`decimal("1e3")`, "1000"},
		{`decimal("-0.00")`, "0.00"},
		{`decimal(12)`, "12"},
		{`decimal(12u)`, "12"},
		{`decimal(decimal("1.0"))`, "1.0"},
		// decimal(double) is exact from the double's shortest text.
		{`decimal(0.1)`, "0.1"},
		{`decimal(0.1 + 0.2)`, "0.30000000000000004"},
		{`decimal(1e21)`, "1000000000000000000000"},
		{`decimal(-2.5e-3)`, "-0.0025"},
		// round: half away from zero (as SQL round and math.round);
		// roundHalfEven: to the even neighbour.
		{`decimal("2.5").round(0)`, "3"},
		{`decimal("-2.5").round(0)`, "-3"},
		{`decimal("2.45").round(1)`, "2.5"},
		{`decimal("1.005").round(2)`, "1.01"},
		{`decimal("1.004").round(2)`, "1.00"},
		{`decimal("1.5").round(2)`, "1.50"},
		{`decimal("1234.5").round(-2)`, "1200"},
		{`decimal("2.5").roundHalfEven(0)`, "2"},
		{`decimal("3.5").roundHalfEven(0)`, "4"},
		{`decimal("-2.5").roundHalfEven(0)`, "-2"},
		{`decimal("2.45").roundHalfEven(1)`, "2.4"},
		{`decimal("2.451").roundHalfEven(1)`, "2.5"},
		{`decimal("1.50").scale()`, "2"},
		{`decimal("15").scale()`, "0"},
		{`decimal("1e3").scale()`, "0"},
		// Conversions.
		{`string(decimal("1.50"))`, "1.50"},
		{`string(decimal("1E+3"))`, "1000"},
		{`double(decimal("0.1")) == 0.1`, "true"},
		{`int(decimal("-1.9"))`, "-1"},
		{`int(decimal("1.9"))`, "1"},
		// Comparisons, exact, with decimals, ints, uints and doubles.
		{`decimal("1.50") == decimal("1.5")`, "true"},
		{`decimal("0.3") < decimal("0.30000000000000001")`, "true"},
		{`decimal("0.5") < 1`, "true"},
		{`decimal("2") >= 2u`, "true"},
		{`decimal("0.1") <= 0.1`, "true"},
		{`decimal("0.1") > 0.1`, "false"},
		{`decimal("1") > 0.0/0.0`, "false"},
		{`[decimal("1"), decimal("2")].exists(x, x == decimal("2.00"))`, "true"},
		{`{"a": decimal("1")}.a + decimal("1")`, "2"},
		{`type(decimal("1")) == type(decimal("2"))`, "true"},
	} {
		out, err := evalCEL(t, c.expr, nil)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		var got string
		switch v := out.(type) {
		case *celDecimal:
			got = v.text()
		default:
			got = fmt.Sprint(v.Value())
		}
		if got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, got, c.want)
		}
	}
}

// TestDecimalDyn runs the operators on a state of type dyn holding a
// decimal, as a step sees it.
func TestDecimalDyn(t *testing.T) {
	st := decimalFromInt(2)
	for _, c := range []struct{ expr, want string }{
		{`state + 1`, "3"},
		{`state * state`, "4"},
		{`state - decimal("0.5")`, "1.5"},
		{`state < 3`, "true"},
		{`state == 2`, "true"},
		{`state == 2.0`, "true"},
		{`state == "2"`, "false"},
		// CEL's int does not know decimals: the decimal goes first.
		{`2 == state`, "false"},
	} {
		out, err := evalCEL(t, c.expr, st)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := fmt.Sprint(out); got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, got, c.want)
		}
	}
	// Mixing with a double or an int on the left is refused, never
	// rounded.
	for _, expr := range []string{`state + 1.5`, `1 + state`, `state * 0.5`, `1 < state`} {
		if out, err := evalCEL(t, expr, st); err == nil {
			t.Errorf("%s = %v, want an error", expr, out)
		}
	}
}

func TestDecimalErrors(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{`decimal("abc")`, "invalid text"},
		{`decimal("NaN")`, "invalid text"},
		{`decimal("Infinity")`, "invalid text"},
		{`decimal(" 1")`, "invalid text"},
		{`decimal("")`, "invalid text"},
		{`decimal(1.0/0.0)`, "not a finite number"},
		{`decimal("1e2000")`, "digits before the point"},
		{`decimal("1e1000")`, "digits before the point"},
		{`decimal("1e-1001")`, "digits after the point"},
		{`decimal("1` + strings.Repeat("0", 1000) + `")`, "significant digits"},
		{`decimal("0.` + strings.Repeat("1", 1001) + `")`, "significant digits"},
		{`decimal("1e999") * decimal("1e999")`, "digits before the point"},
		{`decimal("1e-999") * decimal("1e-999")`, "digits after the point"},
		{`decimal("1e999") * 10`, "digits before the point"},
		{`int(decimal("1e30"))`, "range of an int"},
		{`decimal("1").round(5000)`, "round"},
		// Type errors are compile errors where the types are known.
		{`decimal("1") + 1.5`, "no matching overload"},
		{`1 + decimal("1")`, "no matching overload"},
		{`decimal("1") == 1`, "no matching overload"},
		{`decimal("1") / decimal("3")`, "no matching overload"},
	} {
		out, err := evalCEL(t, c.expr, nil)
		if err == nil {
			t.Errorf("%s = %v, want an error", c.expr, out)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.expr, err, c.want)
		}
	}
	// A sum past the digits allowed is an error, not a rounded value.
	big := "9" + strings.Repeat("0", 998) + ".5"
	if out, err := evalCEL(t, fmt.Sprintf(`decimal("%s") + decimal("0.01")`, big), nil); err == nil {
		t.Errorf("1000 digits + 0.01 = %v, want an error", out)
	}
}

// TestDecimalState checks the state codec and the export of decimals.
func TestDecimalState(t *testing.T) {
	d := celSpec(t, `
		key: '"k"'
		initial: "0"
		step: state`)
	for _, expr := range []string{`decimal("1000.00")`, `decimal("-0.5")`, `decimal("1e3")`, `decimal("0")`,
		`{"total": decimal("12.30"), "n": 3, "at": [decimal("1.1")]}`} {
		v, err := evalCEL(t, expr, nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := d.Encode(v)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		back, err := d.Decode(enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", expr, err)
		}
		e1, _ := d.Export(v)
		e2, _ := d.Export(back)
		if fmt.Sprintf("%#v", e1) != fmt.Sprintf("%#v", e2) {
			t.Errorf("%s: exported %#v, after a round trip %#v", expr, e1, e2)
		}
	}
	v, _ := evalCEL(t, `{"total": decimal("12.30"), "big": decimal("1e3")}`, nil)
	got, err := d.Export(v)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"total": json.Number("12.30"), "big": json.Number("1000")}
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Fatalf("export %#v, want %#v", got, want)
	}
	for _, b := range [][]byte{{1, 'N', 3, 'a', 'b', 'c'}, {1, 'N', 3, 'N', 'a', 'N'}, {1, 'N', 5, '1'}} {
		if _, err := d.Decode(b); err == nil {
			t.Errorf("Decode(%q): no error", b)
		}
	}
}

// FuzzDecimalParse checks that decimal() of any text never panics, and
// that an accepted decimal's saved text reads back as the same decimal,
// scale included, and compares equal to its plain text's decimal.
func FuzzDecimalParse(f *testing.F) {
	for _, s := range []string{"0.10", "-0.00", "1e3", "1E+3", "19.99", ".5", "5.", "+1", "1e-1000", "1e1001", "NaN", "Inf", "1_0", "--1", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDecimal(s)
		if err != nil {
			return
		}
		back, err := parseDecimal(d.d.String())
		if err != nil || back.d.String() != d.d.String() {
			t.Fatalf("%q: saved as %q, read back as %v (%v)", s, d.d.String(), back, err)
		}
		plain, err := parseDecimal(d.text())
		if err != nil || plain.Equal(d) != types.True {
			t.Fatalf("%q: plain text %q reads as %v (%v)", s, d.text(), plain, err)
		}
	})
}

package celfold

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/cockroachdb/apd/v3"
)

// The CEL type decimal: an exact decimal number (docs/derivations.md,
// "Decimals"). Its values are *celDecimal; + - * and comparisons run
// through the traits CEL's standard operators dispatch on, so they cost
// derivations that use no decimal nothing.

// DecimalType is the CEL type of decimals.
var DecimalType = types.NewObjectType("decimal",
	traits.AdderType, traits.SubtractorType, traits.MultiplierType,
	traits.NegatorType, traits.ComparerType)

// Limits of a decimal: at most decimalMaxDigits significant digits, and
// as many before the point and after it, so that its plain text (string())
// reads back as the same decimal. A result beyond them is an error rather
// than a rounded value.
const (
	decimalMaxDigits   = 1000
	decimalMaxExponent = 1000 // apd's limit on the adjusted exponent
)

// decimalCtx does + - * exactly: a result that would need rounding (more
// than decimalMaxDigits digits) traps as Inexact.
var decimalCtx = apd.Context{
	Precision:   decimalMaxDigits,
	MaxExponent: decimalMaxExponent,
	MinExponent: -decimalMaxExponent,
	Traps:       apd.DefaultTraps | apd.Inexact,
}

// decimalRoundCtx rounds: round() and roundHalfEven() set Rounding.
var decimalRoundCtx = apd.Context{
	Precision:   decimalMaxDigits,
	MaxExponent: decimalMaxExponent,
	MinExponent: -decimalMaxExponent,
	Traps:       apd.DefaultTraps,
}

// celDecimal is a CEL decimal value, finite, never modified once made.
type celDecimal struct {
	d apd.Decimal
}

var (
	_ ref.Val           = (*celDecimal)(nil)
	_ traits.Adder      = (*celDecimal)(nil)
	_ traits.Subtractor = (*celDecimal)(nil)
	_ traits.Multiplier = (*celDecimal)(nil)
	_ traits.Negater    = (*celDecimal)(nil)
	_ traits.Comparer   = (*celDecimal)(nil)
)

// newDecimal returns d as a CEL value, checking its limits. A zero loses
// its sign: -0.00 is 0.00.
func newDecimal(d *apd.Decimal) (*celDecimal, error) {
	if d.Form != apd.Finite {
		return nil, errors.New("decimal: not a finite number")
	}
	v := &celDecimal{}
	v.d.Set(d)
	if v.d.IsZero() {
		v.d.Negative = false
		v.d.Exponent = min(v.d.Exponent, 0) // 0E+3 is 0
	}
	nd, e := v.d.NumDigits(), int64(v.d.Exponent)
	switch {
	case nd > decimalMaxDigits:
		return nil, fmt.Errorf("decimal: more than %d significant digits", decimalMaxDigits)
	case nd+e > decimalMaxDigits:
		return nil, fmt.Errorf("decimal: more than %d digits before the point", decimalMaxDigits)
	case -e > decimalMaxDigits:
		return nil, fmt.Errorf("decimal: more than %d digits after the point", decimalMaxDigits)
	}
	return v, nil
}

// parseDecimal reads a decimal's text: digits with an optional sign,
// point and exponent ("12", "-0.10", "1.5e3"). NaN and infinities are
// errors.
func parseDecimal(s string) (*celDecimal, error) {
	if s == "" || len(s) > 2*decimalMaxDigits {
		return nil, fmt.Errorf("decimal: invalid text %q", truncateText(s))
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '.', c == '-', c == '+', c == 'e', c == 'E':
		default:
			return nil, fmt.Errorf("decimal: invalid text %q", truncateText(s))
		}
	}
	var d apd.Decimal
	if _, _, err := d.SetString(s); err != nil {
		return nil, fmt.Errorf("decimal: invalid text %q", truncateText(s))
	}
	return newDecimal(&d)
}

func truncateText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// decimalFromDouble converts a double exactly from its shortest decimal
// text (strconv 'g', -1): 0.1 is 0.1, not the binary value nearest it.
func decimalFromDouble(f float64) (*celDecimal, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("decimal: %v is not a finite number", f)
	}
	return parseDecimal(strconv.FormatFloat(f, 'g', -1, 64))
}

func decimalFromInt(i int64) *celDecimal {
	v := &celDecimal{}
	v.d.SetInt64(i)
	return v
}

func decimalFromUint(u uint64) *celDecimal {
	v := &celDecimal{}
	v.d.Coeff.SetUint64(u)
	v.d.Form = apd.Finite
	return v
}

// decimalOperand converts the other operand of an arithmetic operator: a
// decimal or an int (exact). A double is not: convert it with decimal().
func decimalOperand(v ref.Val) (*celDecimal, bool) {
	switch v := v.(type) {
	case *celDecimal:
		return v, true
	case types.Int:
		return decimalFromInt(int64(v)), true
	}
	return nil, false
}

// decimalComparand converts the other side of a comparison: a decimal,
// an int, a uint or a double (from its shortest text, as decimal() does).
func decimalComparand(v ref.Val) (*celDecimal, bool) {
	switch v := v.(type) {
	case *celDecimal:
		return v, true
	case types.Int:
		return decimalFromInt(int64(v)), true
	case types.Uint:
		return decimalFromUint(uint64(v)), true
	case types.Double:
		d, err := decimalFromDouble(float64(v))
		return d, err == nil
	}
	return nil, false
}

// decimalResult wraps the outcome of an exact operation.
func decimalResult(d *apd.Decimal, cond apd.Condition, err error) ref.Val {
	if err != nil {
		switch {
		case cond.Overflow():
			return types.NewErr("decimal: result has more than %d digits before the point", decimalMaxDigits)
		case cond.Underflow() || cond.Subnormal():
			return types.NewErr("decimal: result has more than %d digits after the point", decimalMaxDigits)
		case cond.Inexact():
			return types.NewErr("decimal: result has more than %d significant digits", decimalMaxDigits)
		}
		return types.NewErr("decimal: %v", err)
	}
	v, err := newDecimal(d)
	if err != nil {
		return types.NewErr("%v", err)
	}
	return v
}

func (v *celDecimal) Add(other ref.Val) ref.Val {
	o, ok := decimalOperand(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	var d apd.Decimal
	cond, err := decimalCtx.Add(&d, &v.d, &o.d)
	return decimalResult(&d, cond, err)
}

func (v *celDecimal) Subtract(other ref.Val) ref.Val {
	o, ok := decimalOperand(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	var d apd.Decimal
	cond, err := decimalCtx.Sub(&d, &v.d, &o.d)
	return decimalResult(&d, cond, err)
}

func (v *celDecimal) Multiply(other ref.Val) ref.Val {
	o, ok := decimalOperand(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	var d apd.Decimal
	cond, err := decimalCtx.Mul(&d, &v.d, &o.d)
	return decimalResult(&d, cond, err)
}

func (v *celDecimal) Negate() ref.Val {
	var d apd.Decimal
	d.Neg(&v.d)
	return decimalResult(&d, 0, nil)
}

func (v *celDecimal) Compare(other ref.Val) ref.Val {
	if d, ok := other.(types.Double); ok && math.IsNaN(float64(d)) {
		return types.False // as CEL compares NaN: never less, equal or greater
	}
	o, ok := decimalComparand(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Int(v.d.Cmp(&o.d))
}

// Equal compares by value with a decimal, an int, a uint or a double
// (from its shortest text): decimal("1.50") == 1.5. CEL's own numbers do
// not know decimals, so 1.5 == decimal("1.50") is false: put the decimal
// on the left, or convert both.
func (v *celDecimal) Equal(other ref.Val) ref.Val {
	if d, ok := other.(types.Double); ok && math.IsNaN(float64(d)) {
		return types.False
	}
	o, ok := decimalComparand(other)
	return types.Bool(ok && v.d.Cmp(&o.d) == 0)
}

// text is the decimal's plain text, without an exponent: "1000.00",
// "-0.5", "1200" for 1.2e3.
func (v *celDecimal) text() string { return v.d.Text('f') }

// round rounds to places digits after the point (before it when
// negative).
func (v *celDecimal) round(places ref.Val, mode apd.Rounder) ref.Val {
	p, ok := places.(types.Int)
	if !ok {
		return types.MaybeNoSuchOverloadErr(places)
	}
	if p > decimalMaxDigits || p < -decimalMaxDigits {
		return types.NewErr("decimal: round to %d places, beyond ±%d", int64(p), decimalMaxDigits)
	}
	ctx := decimalRoundCtx
	ctx.Rounding = mode
	var d apd.Decimal
	if _, err := ctx.Quantize(&d, &v.d, -int32(p)); err != nil {
		return types.NewErr("decimal: round to %d places: %v", int64(p), err)
	}
	return decimalResult(&d, 0, nil)
}

// scale is the number of digits after the point, 0 for an integer.
func (v *celDecimal) scale() ref.Val {
	if v.d.Exponent >= 0 {
		return types.Int(0)
	}
	return types.Int(-int64(v.d.Exponent))
}

func (v *celDecimal) toDouble() ref.Val {
	f, err := strconv.ParseFloat(v.d.Text('E'), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return types.NewErr("decimal: %v", err)
	}
	if math.IsInf(f, 0) {
		return types.NewErr("decimal: %s is beyond the range of a double", truncateText(v.text()))
	}
	return types.Double(f)
}

// toInt truncates toward zero, as int(double) does.
func (v *celDecimal) toInt() ref.Val {
	var d apd.Decimal
	ctx := decimalRoundCtx
	ctx.Rounding = apd.RoundDown
	if _, err := ctx.RoundToIntegralValue(&d, &v.d); err != nil {
		return types.NewErr("decimal: %v", err)
	}
	i, err := d.Int64()
	if err != nil {
		return types.NewErr("decimal: %s is beyond the range of an int", truncateText(v.text()))
	}
	return types.Int(i)
}

func (v *celDecimal) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case reflect.TypeFor[string]():
		return v.text(), nil
	case reflect.TypeFor[json.Number]():
		return json.Number(v.text()), nil
	case reflect.TypeFor[*apd.Decimal]():
		return new(apd.Decimal).Set(&v.d), nil
	case reflect.TypeFor[float64]():
		d, ok := v.toDouble().(types.Double)
		if !ok {
			return nil, fmt.Errorf("decimal %s beyond the range of a double", truncateText(v.text()))
		}
		return float64(d), nil
	}
	return nil, fmt.Errorf("type conversion error from decimal to %v", t)
}

func (v *celDecimal) ConvertToType(t ref.Type) ref.Val {
	switch t.TypeName() {
	case DecimalType.TypeName():
		return v
	case types.StringType.TypeName():
		return types.String(v.text())
	case types.DoubleType.TypeName():
		return v.toDouble()
	case types.IntType.TypeName():
		return v.toInt()
	case types.TypeType.TypeName():
		return DecimalType
	}
	return types.NewErr("type conversion error from 'decimal' to '%s'", t)
}

func (v *celDecimal) Type() ref.Type { return DecimalType }

func (v *celDecimal) Value() any { return &v.d }

func (v *celDecimal) String() string { return v.text() }

// decimalLibrary declares the decimal type's functions and the operator
// overloads the type checker needs; the operators themselves run through
// the traits above.
func decimalLibrary() []cel.EnvOption {
	dec := DecimalType
	args := func(ts ...*cel.Type) []*cel.Type { return ts }
	unary := func(fn func(ref.Val) ref.Val) cel.OverloadOpt { return cel.UnaryBinding(fn) }
	arith := func(op, name string) cel.EnvOption {
		return cel.Function(op,
			cel.Overload(name+"_decimal_decimal", args(dec, dec), dec),
			cel.Overload(name+"_decimal_int", args(dec, types.IntType), dec))
	}
	compare := func(op, name string) cel.EnvOption {
		return cel.Function(op,
			cel.Overload(name+"_decimal_decimal", args(dec, dec), types.BoolType),
			cel.Overload(name+"_decimal_int", args(dec, types.IntType), types.BoolType),
			cel.Overload(name+"_decimal_uint", args(dec, types.UintType), types.BoolType),
			cel.Overload(name+"_decimal_double", args(dec, types.DoubleType), types.BoolType))
	}
	member := func(fn func(*celDecimal, ref.Val) ref.Val) cel.OverloadOpt {
		return cel.BinaryBinding(func(a, b ref.Val) ref.Val {
			d, ok := a.(*celDecimal)
			if !ok {
				return types.MaybeNoSuchOverloadErr(a)
			}
			return fn(d, b)
		})
	}
	onDecimal := func(fn func(*celDecimal) ref.Val) cel.OverloadOpt {
		return unary(func(a ref.Val) ref.Val {
			d, ok := a.(*celDecimal)
			if !ok {
				return types.MaybeNoSuchOverloadErr(a)
			}
			return fn(d)
		})
	}
	valOrErr := func(d *celDecimal, err error) ref.Val {
		if err != nil {
			return types.NewErr("%v", err)
		}
		return d
	}
	return []cel.EnvOption{
		cel.Types(dec),
		cel.Function("decimal",
			cel.Overload("decimal_to_decimal", args(dec), dec, unary(func(a ref.Val) ref.Val { return a })),
			cel.Overload("string_to_decimal", args(types.StringType), dec, unary(func(a ref.Val) ref.Val {
				return valOrErr(parseDecimal(string(a.(types.String))))
			})),
			cel.Overload("int_to_decimal", args(types.IntType), dec, unary(func(a ref.Val) ref.Val {
				return decimalFromInt(int64(a.(types.Int)))
			})),
			cel.Overload("uint_to_decimal", args(types.UintType), dec, unary(func(a ref.Val) ref.Val {
				return decimalFromUint(uint64(a.(types.Uint)))
			})),
			cel.Overload("double_to_decimal", args(types.DoubleType), dec, unary(func(a ref.Val) ref.Val {
				return valOrErr(decimalFromDouble(float64(a.(types.Double))))
			}))),
		arith("_+_", "add"),
		arith("_-_", "subtract"),
		arith("_*_", "multiply"),
		cel.Function("-_", cel.Overload("negate_decimal", args(dec), dec)),
		compare("_<_", "less"),
		compare("_<=_", "less_equals"),
		compare("_>_", "greater"),
		compare("_>=_", "greater_equals"),
		cel.Function("round",
			cel.MemberOverload("decimal_round_int", args(dec, types.IntType), dec,
				member(func(d *celDecimal, p ref.Val) ref.Val { return d.round(p, apd.RoundHalfUp) }))),
		cel.Function("roundHalfEven",
			cel.MemberOverload("decimal_round_half_even_int", args(dec, types.IntType), dec,
				member(func(d *celDecimal, p ref.Val) ref.Val { return d.round(p, apd.RoundHalfEven) }))),
		cel.Function("scale",
			cel.MemberOverload("decimal_scale", args(dec), types.IntType, onDecimal((*celDecimal).scale))),
		cel.Function("string",
			cel.Overload("decimal_to_string", args(dec), types.StringType,
				onDecimal(func(d *celDecimal) ref.Val { return types.String(d.text()) }))),
		cel.Function("double",
			cel.Overload("decimal_to_double", args(dec), types.DoubleType, onDecimal((*celDecimal).toDouble))),
		cel.Function("int",
			cel.Overload("decimal_to_int", args(dec), types.IntType, onDecimal((*celDecimal).toInt))),
	}
}

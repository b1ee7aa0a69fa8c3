package celfold

import (
	"encoding/json"
	"errors"
	"math"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/cockroachdb/apd/v3"
)

// Expressions over derivations' exported states (rederive's invariants)
// see the derivations' CEL library and number rules: StateLibrary is the
// library, StateValue reads an exported value back as the CEL value a
// derivation's state has.

// StateLibrary is the CEL library of expressions over exported states:
// the derivations' (the standard library, the pure extensions,
// timestamps in UTC, decimals) and sum(list).
//
// sum adds a list of numbers: ints to an int (an error on overflow); with
// a double or uint among them, to a double; with a decimal among them,
// exactly to a decimal (ints and uints with it; a double with a decimal
// is an error, as decimal + double is in a derivation: convert it with
// decimal()).
func StateLibrary() []cel.EnvOption {
	return append(celLibrary(),
		cel.Function("sum", cel.Overload("sum_list", []*cel.Type{cel.ListType(cel.DynType)}, cel.DynType,
			cel.UnaryBinding(celSum))))
}

// StateValue is the CEL value of v, a value as fold.Export gives it (of a
// CEL derivation, or of a Go one): a decimal (json.Number, the form Export
// gives decimals) is a decimal again, maps of strings and lists are
// converted element by element, and the rest as CEL's default adapter
// does (int64, uint64, float64, bool, string, []byte, time.Time, nil). A
// json.Number that is not a decimal CEL can hold is an error value: an
// expression that reads it fails.
func StateValue(v any) ref.Val {
	return stateValue(v, 0)
}

func stateValue(v any, depth int) ref.Val {
	if depth > celMaxDepth {
		return types.NewErr("state nested too deeply")
	}
	switch v := v.(type) {
	case json.Number:
		d, err := parseDecimal(string(v))
		if err != nil {
			return types.NewErr("%v", err)
		}
		return d
	case time.Time:
		return types.Timestamp{Time: v.UTC()}
	case map[string]any:
		m := make(map[ref.Val]ref.Val, len(v))
		for k, e := range v {
			m[types.String(k)] = stateValue(e, depth+1)
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, m)
	case []any:
		l := make([]ref.Val, len(v))
		for i, e := range v {
			l[i] = stateValue(e, depth+1)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, l)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

var errSum = errors.New("sum: not a number")

// celSum is sum(list) (see StateLibrary).
func celSum(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("sum: not a list")
	}
	for it := l.Iterator(); it.HasNext() == types.True; {
		if _, ok := it.Next().(*celDecimal); ok {
			return decimalSum(l)
		}
	}
	var isum int64
	var fsum float64
	double := false
	for it := l.Iterator(); it.HasNext() == types.True; {
		switch x := it.Next().(type) {
		case types.Int:
			if !double {
				if (x > 0 && isum > math.MaxInt64-int64(x)) || (x < 0 && isum < math.MinInt64-int64(x)) {
					return types.NewErr("sum: int overflow")
				}
				isum += int64(x)
			}
			fsum += float64(x)
		case types.Uint:
			double = true
			fsum += float64(x)
		case types.Double:
			double = true
			fsum += float64(x)
		default:
			return types.NewErr("%v: %s", errSum, x.Type().TypeName())
		}
	}
	if double {
		return types.Double(fsum)
	}
	return types.Int(isum)
}

// decimalSum adds a list with a decimal in it exactly: decimals, ints
// and uints.
func decimalSum(l traits.Lister) ref.Val {
	var acc apd.Decimal
	for it := l.Iterator(); it.HasNext() == types.True; {
		var o *celDecimal
		switch x := it.Next().(type) {
		case *celDecimal:
			o = x
		case types.Int:
			o = decimalFromInt(int64(x))
		case types.Uint:
			o = decimalFromUint(uint64(x))
		case types.Double:
			return types.NewErr("sum: a double among decimals: convert it with decimal()")
		default:
			return types.NewErr("%v: %s", errSum, x.Type().TypeName())
		}
		var next apd.Decimal
		if cond, err := decimalCtx.Add(&next, &acc, &o.d); err != nil {
			return decimalResult(&next, cond, err)
		}
		acc.Set(&next)
	}
	return decimalResult(&acc, 0, nil)
}

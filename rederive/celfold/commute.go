package celfold

import (
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// SumStep reports whether a step is recognisably a sum that gives the
// same state whatever the order of the events: initial is a number
// literal (an int, a uint, or decimal() of a literal), and step adds to
// state or subtracts from it terms that do not read state, possibly
// chosen by conditions that do not read state:
//
//	state + event.amount
//	state + 1
//	key == event.from ? state - event.amount : state + event.amount
//	event.kind == "skip" ? state : state + 1
//
// A double sum is not one: doubles round differently in another order. A
// false answer proves nothing: the step may still commute (min, max, set
// union), which only its author can declare.
func SumStep(initial, step string) bool {
	env, err := celEnvsJSON()
	if err != nil {
		return false
	}
	ia, iss := env.initial.Parse(initial)
	if iss.Err() != nil || !numberLiteral(ia.NativeRep().Expr()) {
		return false
	}
	sa, iss := env.step.Parse(step)
	if iss.Err() != nil {
		return false
	}
	return sumOfState(sa.NativeRep().Expr())
}

// numberLiteral reports whether e is an int or uint literal, or decimal()
// of a literal.
func numberLiteral(e ast.Expr) bool {
	switch e.Kind() {
	case ast.LiteralKind:
		switch e.AsLiteral().(type) {
		case types.Int, types.Uint:
			return true
		}
	case ast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == operators.Negate && len(c.Args()) == 1 {
			return numberLiteral(c.Args()[0])
		}
		return c.FunctionName() == "decimal" && !c.IsMemberFunction() && len(c.Args()) == 1 &&
			c.Args()[0].Kind() == ast.LiteralKind
	}
	return false
}

// sumOfState reports whether e is state, state ± term, term + state or a
// conditional choosing between such, where terms and conditions do not
// read state.
func sumOfState(e ast.Expr) bool {
	if isIdent(e, "state") {
		return true
	}
	if e.Kind() != ast.CallKind {
		return false
	}
	c := e.AsCall()
	args := c.Args()
	switch c.FunctionName() {
	case operators.Conditional:
		return len(args) == 3 && !readsState(args[0]) && sumOfState(args[1]) && sumOfState(args[2])
	case operators.Add:
		if len(args) != 2 {
			return false
		}
		a, b := args[0], args[1]
		if !isIdent(a, "state") {
			a, b = b, a
		}
		return isIdent(a, "state") && !readsState(b)
	case operators.Subtract:
		return len(args) == 2 && isIdent(args[0], "state") && !readsState(args[1])
	}
	return false
}

// readsState reports whether e may read the variable state. A
// comprehension's own variable named state hides it; it is counted as a
// read all the same.
func readsState(e ast.Expr) bool {
	found := false
	ast.PostOrderVisit(e, ast.NewExprVisitor(func(x ast.Expr) {
		if isIdent(x, "state") {
			found = true
		}
	}))
	return found
}

package celfold

import (
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// maxPlanFields is the most payload fields a plan reads: beyond it the
// general decoder is no slower.
const maxPlanFields = 4

// fastPlan is what the static analysis of a JSON derivation's expressions
// found: the top-level payload fields they read, when they read the event
// only as event.<field> (and has(event.<field>)), and the expressions
// simple enough to run without CEL. Prepare then decodes those fields only
// (fast.go), and evaluates the rest in CEL over an object of those fields,
// which answers every such selection as the whole payload would.
type fastPlan struct {
	fields []string // sorted, unique

	filter *planCompare // nil: CEL (or no filter)
	key    int          // the field the key is, or -1: CEL
	step   *planArith   // nil: CEL
}

// planCompare is a filter event.<field> == "text" (or !=).
type planCompare struct {
	field int
	text  string
	not   bool
}

// planArith is a step state + event.<field>, event.<field> + state,
// state - event.<field>, state + literal, literal + state or
// state - literal.
type planArith struct {
	field int     // -1: the literal
	lit   planNum // the literal, when field is -1
	sub   bool    // state - operand
}

// planNum is a literal of a plan: an int or a double.
type planNum struct {
	isInt bool
	i     int64
	f     float64
}

// newFastPlan analyses the checked expressions of a JSON derivation. It
// returns nil when an expression reads the event otherwise than by
// selecting top-level fields, or reads more than maxPlanFields of them.
func newFastPlan(filter, key, step *cel.Ast) *fastPlan {
	var fields []string
	for _, a := range []*cel.Ast{filter, key, step} {
		if a == nil {
			continue
		}
		if !eventFields(a.NativeRep().Expr(), &fields) {
			return nil
		}
	}
	slices.Sort(fields)
	fields = slices.Compact(fields)
	if len(fields) > maxPlanFields {
		return nil
	}
	p := &fastPlan{fields: fields, key: -1}
	if filter != nil {
		p.filter = p.compare(filter.NativeRep().Expr())
	}
	if key != nil {
		p.key = p.field(key.NativeRep().Expr())
	}
	if step != nil {
		p.step = p.arith(step.NativeRep().Expr())
	}
	return p
}

// eventFields adds to fields the names e selects on the variable event,
// and reports whether e uses event only that way.
func eventFields(e ast.Expr, fields *[]string) bool {
	switch e.Kind() {
	case ast.IdentKind:
		return e.AsIdent() != "event"
	case ast.LiteralKind:
		return true
	case ast.SelectKind:
		s := e.AsSelect()
		if op := s.Operand(); op.Kind() == ast.IdentKind && op.AsIdent() == "event" {
			*fields = append(*fields, s.FieldName())
			return true
		}
		return eventFields(s.Operand(), fields)
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !eventFields(c.Target(), fields) {
			return false
		}
		for _, a := range c.Args() {
			if !eventFields(a, fields) {
				return false
			}
		}
		return true
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			if !eventFields(el, fields) {
				return false
			}
		}
		return true
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			if !eventFields(me.Key(), fields) || !eventFields(me.Value(), fields) {
				return false
			}
		}
		return true
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if !eventFields(f.AsStructField().Value(), fields) {
				return false
			}
		}
		return true
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		// A variable of the comprehension named event would hide the event.
		if c.IterVar() == "event" || c.AccuVar() == "event" || c.HasIterVar2() && c.IterVar2() == "event" {
			return false
		}
		for _, x := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			if !eventFields(x, fields) {
				return false
			}
		}
		return true
	}
	return false
}

// field returns the position in p.fields of the field e selects on event,
// or -1 when e is not such a selection.
func (p *fastPlan) field(e ast.Expr) int {
	if e.Kind() != ast.SelectKind {
		return -1
	}
	s := e.AsSelect()
	if s.IsTestOnly() {
		return -1
	}
	if op := s.Operand(); op.Kind() != ast.IdentKind || op.AsIdent() != "event" {
		return -1
	}
	i, _ := slices.BinarySearch(p.fields, s.FieldName())
	return i
}

func isIdent(e ast.Expr, name string) bool {
	return e.Kind() == ast.IdentKind && e.AsIdent() == name
}

// compare recognises event.<field> == "text", "text" == event.<field> and
// their != forms.
func (p *fastPlan) compare(e ast.Expr) *planCompare {
	if e.Kind() != ast.CallKind {
		return nil
	}
	c := e.AsCall()
	fn := c.FunctionName()
	if (fn != operators.Equals && fn != operators.NotEquals) || len(c.Args()) != 2 {
		return nil
	}
	a, b := c.Args()[0], c.Args()[1]
	if p.field(a) < 0 {
		a, b = b, a
	}
	f := p.field(a)
	if f < 0 || b.Kind() != ast.LiteralKind {
		return nil
	}
	s, ok := b.AsLiteral().(types.String)
	if !ok {
		return nil
	}
	return &planCompare{field: f, text: string(s), not: fn == operators.NotEquals}
}

// arith recognises a step that adds a field or a number to the state, or
// subtracts one from it.
func (p *fastPlan) arith(e ast.Expr) *planArith {
	if e.Kind() != ast.CallKind {
		return nil
	}
	c := e.AsCall()
	fn := c.FunctionName()
	if (fn != operators.Add && fn != operators.Subtract) || len(c.Args()) != 2 {
		return nil
	}
	a, b := c.Args()[0], c.Args()[1]
	if !isIdent(a, "state") {
		if fn == operators.Subtract {
			return nil // x - state is not state - x
		}
		a, b = b, a
	}
	if !isIdent(a, "state") {
		return nil
	}
	op := &planArith{field: p.field(b), sub: fn == operators.Subtract}
	if op.field >= 0 {
		return op
	}
	if b.Kind() != ast.LiteralKind {
		return nil
	}
	switch v := b.AsLiteral().(type) {
	case types.Int:
		op.lit = planNum{isInt: true, i: int64(v)}
	case types.Double:
		op.lit = planNum{f: float64(v)}
	default:
		return nil
	}
	return op
}

// Package celfold compiles a derivation's CEL expressions (filter, key,
// initial, step) into a fold.Derivation: the compiler and its environment
// (compile.go), the derivation's evaluation (derivation.go), the CEL
// values of events and metadata (object.go), a lazy JSON decoder straight
// into CEL values (json.go, json_object.go), and the exact state codec
// (state.go). It knows nothing of YAML: package spec places its errors.
package celfold

import (
	"fmt"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/checker"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"

	"github.com/auditd/auditd/rederive/fold"
)

// celDerivation is a Derivation compiled from a Spec.
type celDerivation struct {
	name    string
	sources []string
	raw     bool // decode: raw

	filter  *celProgram // nil: every event applies
	key     *celProgram
	initial *celProgram
	step    *celProgram

	allKeys *celProgram // nil: no event applies to every key
	stepAll *celProgram // with allKeys
	value   *celProgram // nil: a state is its own value

	costLimit uint64 // of one evaluation of an expression

	initialConst ref.Val // initial's value when it does not use key
	usesMeta     bool    // filter, key, step, all_keys or step_all reads meta
	valueKey     bool    // value reads key

	plan *fastPlan // nil: no fast path (plan.go)
}

func (d *celDerivation) Name() string { return d.name }

func (d *celDerivation) Sources() []string { return slices.Clone(d.sources) }

// celEnvs are the CEL environments of each expression, for one decode mode.
type celEnvs struct {
	event   *cel.Env // filter, key and all_keys: event, meta
	initial *cel.Env // key
	step    *cel.Env // step and step_all: state, event, key, meta
	value   *cel.Env // state, key
}

// celLibrary is the CEL library derivations see: the standard library and
// the pure extensions. Nothing here reads a clock, randomness or I/O;
// timestamps without a time zone argument are read in UTC.
func celLibrary() []cel.EnvOption {
	lib := []cel.EnvOption{
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Math(),
		ext.Lists(),
		ext.Sets(),
		ext.Encoders(),
		ext.Bindings(),
		ext.TwoVarComprehensions(),
		ext.Regex(),
	}
	lib = append(lib, timestampLibrary()...)
	return append(lib, decimalLibrary()...)
}

func newCELEnvs(eventType *cel.Type) (*celEnvs, error) {
	base, err := cel.NewEnv(celLibrary()...)
	if err != nil {
		return nil, err
	}
	meta := cel.Variable("meta", cel.MapType(cel.StringType, cel.DynType))
	event := cel.Variable("event", eventType)
	key := cel.Variable("key", cel.StringType)
	state := cel.Variable("state", cel.DynType)
	var e celEnvs
	if e.event, err = base.Extend(event, meta); err != nil {
		return nil, err
	}
	if e.initial, err = base.Extend(key); err != nil {
		return nil, err
	}
	if e.step, err = base.Extend(state, event, key, meta); err != nil {
		return nil, err
	}
	if e.value, err = base.Extend(state, key); err != nil {
		return nil, err
	}
	return &e, nil
}

// Expressions are the CEL side of a derivation: its name and sources, how
// the payload becomes the variable event, and its expressions.
type Expressions struct {
	Name    string
	Sources []string
	// Raw makes event the payload's bytes instead of its decoded JSON.
	Raw bool
	// Filter (optional), Key, Initial and Step are CEL expressions (see
	// Spec); an empty one is not compiled.
	Filter, Key, Initial, Step string
	// AllKeys (optional, over event and meta, a bool) marks the events
	// that apply to every key; StepAll (over state, event, key and meta)
	// gives each key's new state for them. Both or neither.
	AllKeys, StepAll string
	// Value (optional, over state and key) maps a key's state to the value
	// exported for comparison.
	Value string
	// CostLimit bounds the CEL cost of one evaluation of one expression
	// (a filter, a key, a step for one key): past it the evaluation stops
	// with an error, that event's derivation error. 0: DefaultCostLimit.
	CostLimit uint64
}

// DefaultCostLimit is the CostLimit of Expressions that set none. CEL
// counts about one unit per operation and per element or byte a function
// walks: the folds of the documentation's examples cost under 100 per
// event, a step walking a state of 10,000 entries about 30,000.
const DefaultCostLimit = 1_000_000

// interruptEvery is how many iterations of a comprehension (map, filter,
// all, exists...) pass between checks of the fold's context, so that a
// cancelled fold stops an evaluation in progress.
const interruptEvery = 1000

// ExprError is an error in one of a derivation's expressions.
type Error struct {
	// Field names the expression: "filter", "key", "initial", "step",
	// "all_keys", "step_all" or "value" ("" for the CEL environment
	// itself).
	Field string
	// Line (1-based) and Column (0-based) place the error inside the
	// expression, as CEL reports it; Line is 0 when unknown.
	Line, Column int
	Msg          string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Compile compiles a derivation's expressions into a fold.Derivation. It
// returns a nil derivation when there are errors, or when Key, Initial or
// Step is absent (absent expressions are left to the caller to report).
func Compile(x Expressions) (fold.Derivation, []*Error) {
	d, errs := compile(x)
	if d == nil {
		return nil, errs
	}
	return d, errs
}

func compile(x Expressions) (*celDerivation, []*Error) {
	envs, err := celEnvsJSON()
	if x.Raw {
		envs, err = celEnvsRaw()
	}
	if err != nil {
		return nil, []*Error{{Msg: fmt.Sprintf("cel environment: %v", err)}}
	}
	d := &celDerivation{name: x.Name, sources: slices.Clone(x.Sources), raw: x.Raw, costLimit: x.CostLimit}
	if d.costLimit == 0 {
		d.costLimit = DefaultCostLimit
	}
	var errs []*Error
	errAt := func(field, format string, args ...any) {
		errs = append(errs, &Error{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	compile := func(env *cel.Env, field, expr string) *cel.Ast {
		if strings.TrimSpace(expr) == "" {
			return nil
		}
		ast, iss := env.Compile(expr)
		if iss != nil && iss.Err() != nil {
			for _, e := range iss.Errors() {
				line, col := e.Location.Line(), e.Location.Column()
				errs = append(errs, &Error{Field: field, Line: line, Column: col,
					Msg: fmt.Sprintf("ERROR: <input>:%d:%d: %s", line, col+1, e.Message)})
			}
			return nil
		}
		return ast
	}
	program := func(env *cel.Env, field string, ast *cel.Ast) *celProgram {
		if ast == nil {
			return nil
		}
		p, err := newCELProgram(env, ast, d.costLimit)
		if err != nil {
			errAt(field, "%v", err)
			return nil
		}
		return p
	}

	filter := compile(envs.event, "filter", x.Filter)
	if filter != nil {
		if t := filter.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
			errAt("filter", "filter must give a bool, got %s", t)
			filter = nil
		}
	}
	key := compile(envs.event, "key", x.Key)
	if key != nil && !celKeyType(key.OutputType()) {
		errAt("key", "key must give a string or a list of strings, got %s", key.OutputType())
		key = nil
	}
	initial := compile(envs.initial, "initial", x.Initial)
	step := compile(envs.step, "step", x.Step)
	allKeys := compile(envs.event, "all_keys", x.AllKeys)
	if allKeys != nil {
		if t := allKeys.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
			errAt("all_keys", "all_keys must give a bool, got %s", t)
			allKeys = nil
		}
	}
	stepAll := compile(envs.step, "step_all", x.StepAll)
	value := compile(envs.value, "value", x.Value)
	hasAll, hasStepAll := strings.TrimSpace(x.AllKeys) != "", strings.TrimSpace(x.StepAll) != ""
	switch {
	case hasAll && !hasStepAll:
		errAt("all_keys", "all_keys needs step_all: the new state of every key when an event matches")
	case hasStepAll && !hasAll:
		errAt("step_all", "step_all needs all_keys: which events apply to every key")
	}

	d.filter = program(envs.event, "filter", filter)
	d.key = program(envs.event, "key", key)
	d.initial = program(envs.initial, "initial", initial)
	d.step = program(envs.step, "step", step)
	d.allKeys = program(envs.event, "all_keys", allKeys)
	d.stepAll = program(envs.step, "step_all", stepAll)
	d.value = program(envs.value, "value", value)
	d.valueKey = celReferences(value, "key")
	d.usesMeta = celReferences(filter, "meta") || celReferences(key, "meta") || celReferences(step, "meta") ||
		celReferences(allKeys, "meta") || celReferences(stepAll, "meta")
	if !x.Raw && key != nil && step != nil && !hasAll {
		d.plan = newFastPlan(filter, key, step)
	}

	if initial != nil && d.initial != nil && !celReferences(initial, "key") {
		v, err := d.eval(nil, d.initial, &celActivation{})
		if err != nil {
			errAt("initial", "%v", err)
		}
		d.initialConst = v
	}
	if len(errs) > 0 || d.key == nil || d.initial == nil || d.step == nil ||
		hasAll && (d.allKeys == nil || d.stepAll == nil) || strings.TrimSpace(x.Value) != "" && d.value == nil {
		return nil, errs
	}
	return d, nil
}

// celProgram is a compiled expression.
type celProgram struct {
	cel.Program
	// loops: the expression has a comprehension, the one part of an
	// evaluation that can run long; it checks the fold's context.
	loops bool
}

// estimateSize is the size (bytes of a string, elements of a list or map)
// the cost estimate assumes of every value: an expression that costs at
// most the limit with values of up to this size is not metered.
const estimateSize = 1 << 20

// newCELProgram plans ast for evaluation. An expression whose estimated
// worst case, with values of up to estimateSize, is within limit runs
// unmetered (a sum, a comparison, a map literal: the folds' hot path); any
// other is metered and stopped past limit.
func newCELProgram(env *cel.Env, ast *cel.Ast, limit uint64) (*celProgram, error) {
	loops := hasComprehension(ast.NativeRep().Expr())
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if loops {
		opts = append(opts, cel.InterruptCheckFrequency(interruptEvery))
	}
	if est, err := env.EstimateCost(ast, sizeEstimator{}); err != nil || est.Max > limit {
		opts = append(opts, cel.CostLimit(limit))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, err
	}
	return &celProgram{Program: prg, loops: loops}, nil
}

// sizeEstimator bounds every value's size by estimateSize for the
// cost estimate, and leaves call costs to CEL's model.
type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: estimateSize}
}

func (sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// hasComprehension reports whether e holds a comprehension.
func hasComprehension(e ast.Expr) bool {
	found := false
	ast.PreOrderVisit(e, ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() == ast.ComprehensionKind {
			found = true
		}
	}))
	return found
}

// celKeyType reports whether t can be a key expression's type.
func celKeyType(t *cel.Type) bool {
	switch t.Kind() {
	case types.StringKind, types.DynKind:
		return true
	case types.ListKind:
		if p := t.Parameters(); len(p) == 1 {
			k := p[0].Kind()
			return k == types.StringKind || k == types.DynKind
		}
	}
	return false
}

// celReferences reports whether a checked expression reads the variable
// name.
func celReferences(ast *cel.Ast, name string) bool {
	if ast == nil {
		return false
	}
	for _, r := range ast.NativeRep().ReferenceMap() {
		if r.Name == name {
			return true
		}
	}
	return false
}

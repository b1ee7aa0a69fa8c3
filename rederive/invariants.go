package rederive

import (
	"fmt"
	"iter"
	"maps"
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/rederive/celfold"
	"github.com/auditd/auditd/rederive/fold"
)

// Invariants are conditions a derivation's state must meet after each run
// (docs/checkers.md#invariants): CEL expressions over its exported state,
// in the derivations' CEL library and with their number rules (celfold's
// StateLibrary and StateValue). They are checked over a fold.Result
// (Invariants.CheckResult), and a failing key's finding carries its
// lineage (AttachInvariantLineage), as a drift does.

// InvariantSpec is a condition a derivation's state must meet after each
// run, as a CEL expression giving a bool. Exactly one of PerKey and All is
// set.
type InvariantSpec struct {
	// Name names the invariant in findings ("non_negative").
	Name string `yaml:"name"`
	// PerKey is checked for every key, over key (string) and state (the
	// key's state as exported): "state >= 0", "state.balance >= 0".
	PerKey string `yaml:"per_key"`
	// All is checked once over every key: states (map of key to state),
	// values (the states, in key order), count (the number of keys), and the
	// function sum(list) (of ints, or of numbers as a double, or with
	// decimals as a decimal): "sum(values) == 0",
	// "sum(states.transformList(k, v, v.balance)) == 0".
	All string `yaml:"all"`

	// pos and exprPos place the invariant's mapping and expression in
	// the YAML it was read from (UnmarshalYAML), for errors.
	pos, exprPos yamlPos
}

// Invariants are a derivation's compiled invariants.
type Invariants struct {
	derivation string
	perKey     []compiledInvariant
	all        []compiledInvariant
}

type compiledInvariant struct {
	name, expr string
	prg        cel.Program
}

// InvariantFinding is an invariant that fails: on one key's state (Key
// set) or over every key.
type InvariantFinding struct {
	// Derivation is the derivation's name.
	Derivation string
	// Key is the key a per-key invariant fails on; "" for an all-keys
	// invariant and for the finding that counts the keys past
	// MaxInvariantFindings.
	Key string
	// Detail names the invariant, its expression and what fails.
	Detail string
	// Lineage is, for a per-key finding (AttachInvariantLineage), the
	// last entries applied to Key, oldest first, each with its inclusion
	// proof in the signed checkpoint (in Evidence) of its log.
	Lineage []Evidence
	// Evidence holds the signed checkpoint notes the lineage is proven
	// in, one per log.
	Evidence []string
}

// MaxInvariantFindings bounds the per-key findings one invariant reports in
// one check; the last finding says how many more keys fail it.
const MaxInvariantFindings = 100

// invariantCostLimit bounds the CEL cost of one evaluation of one
// invariant.
const invariantCostLimit = 1_000_000

// CompileInvariants compiles the invariants of the named derivation. Each
// must have a name, exactly one expression, and give a bool; an error is
// an *InvariantError, placed in the YAML the specs were read from.
func CompileInvariants(derivation string, specs []InvariantSpec) (*Invariants, error) {
	base, err := cel.NewEnv(celfold.StateLibrary()...)
	if err != nil {
		return nil, err
	}
	keyEnv, err := base.Extend(cel.Variable("key", cel.StringType), cel.Variable("state", cel.DynType))
	if err != nil {
		return nil, err
	}
	allEnv, err := base.Extend(cel.Variable("states", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("values", cel.ListType(cel.DynType)), cel.Variable("count", cel.IntType))
	if err != nil {
		return nil, err
	}
	iv := &Invariants{derivation: derivation}
	seen := map[string]bool{}
	for i, s := range specs {
		fail := func(p yamlPos, format string, args ...any) error {
			return &InvariantError{Line: p.line, Column: p.column, Derivation: derivation, Invariant: s.Name,
				Msg: fmt.Sprintf(format, args...)}
		}
		if s.Name == "" {
			return nil, fail(s.pos, "invariant %d: name is required", i)
		}
		if seen[s.Name] {
			return nil, fail(s.pos, "name used twice")
		}
		seen[s.Name] = true
		env, expr, dst := keyEnv, s.PerKey, &iv.perKey
		switch {
		case (s.PerKey == "") == (s.All == ""):
			return nil, fail(s.pos, "exactly one of per_key and all is required")
		case s.All != "":
			env, expr, dst = allEnv, s.All, &iv.all
		}
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			e := fail(s.exprPos, "%v", iss.Err()).(*InvariantError)
			if errs := iss.Errors(); len(errs) > 0 {
				e.Line, e.Column = s.exprPos.at(errs[0].Location.Line(), errs[0].Location.Column())
			}
			return nil, e
		}
		if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
			return nil, fail(s.exprPos, "gives %s, want bool", t)
		}
		prg, err := env.Program(ast, cel.CostLimit(invariantCostLimit))
		if err != nil {
			return nil, fail(s.exprPos, "%v", err)
		}
		*dst = append(*dst, compiledInvariant{name: s.Name, expr: expr, prg: prg})
	}
	return iv, nil
}

// Derivation is the name of the derivation the invariants are of.
func (iv *Invariants) Derivation() string { return iv.derivation }

// Check evaluates the invariants over states, the derivation's state after
// a run (each key's exported value, in key order), and returns a finding
// for each key a per-key invariant fails on (at most MaxInvariantFindings
// per invariant, the last counting the rest) and for each all-keys
// invariant that fails. An expression that cannot be evaluated on a state
// (a missing field, a type it does not take) fails it: the invariant
// claims to hold for every state.
func (iv *Invariants) Check(states iter.Seq2[string, any]) []InvariantFinding {
	var out []InvariantFinding
	failed := make([]int, len(iv.perKey))
	var all map[string]any // of ref.Val
	var values []ref.Val
	if len(iv.all) > 0 {
		all = map[string]any{}
	}
	found := func(inv compiledInvariant, key, detail string) {
		out = append(out, InvariantFinding{Derivation: iv.derivation, Key: key,
			Detail: fmt.Sprintf("invariant %s (%s): %s", inv.name, inv.expr, detail)})
	}
	for key, state := range states {
		v := celfold.StateValue(state)
		if all != nil {
			all[key] = v
			values = append(values, v)
		}
		for i, inv := range iv.perKey {
			ok, err := evalBool(inv.prg, map[string]any{"key": key, "state": v})
			if ok {
				continue
			}
			failed[i]++
			if failed[i] > MaxInvariantFindings {
				continue
			}
			if err != nil {
				found(inv, key, fmt.Sprintf("key %q: cannot be evaluated on its state %v: %v", key, state, err))
			} else {
				found(inv, key, fmt.Sprintf("key %q: false for state %v", key, state))
			}
		}
	}
	for i, inv := range iv.perKey {
		if n := failed[i] - MaxInvariantFindings; n > 0 {
			found(inv, "", fmt.Sprintf("and %d more keys", n))
		}
	}
	if len(iv.all) > 0 {
		vars := map[string]any{"states": types.NewStringInterfaceMap(types.DefaultTypeAdapter, all),
			"values": types.NewRefValList(types.DefaultTypeAdapter, values), "count": int64(len(values))}
		for _, inv := range iv.all {
			ok, err := evalBool(inv.prg, vars)
			switch {
			case err != nil:
				found(inv, "", fmt.Sprintf("over %s: cannot be evaluated: %v", plural.N(len(values), "key", "keys"), err))
			case !ok:
				found(inv, "", "false over "+plural.N(len(values), "key", "keys"))
			}
		}
	}
	return out
}

// CheckResult checks the invariants over res, a result of derivation d
// (its keys in order, each state exported with fold.Export as the derived
// store is compared with). A state that cannot be exported is an error,
// and then there are no findings.
func (iv *Invariants) CheckResult(d fold.Derivation, res *fold.Result) ([]InvariantFinding, error) {
	keys := slices.Sorted(maps.Keys(res.States))
	var exportErr error
	states := func(yield func(string, any) bool) {
		for _, k := range keys {
			v, err := fold.Export(d, k, res.States[k])
			if err != nil {
				exportErr = fmt.Errorf("export key %q: %w", k, err)
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
	fs := iv.Check(states)
	if exportErr != nil {
		return nil, exportErr
	}
	return fs, nil
}

func evalBool(prg cel.Program, vars map[string]any) (bool, error) {
	v, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("gives %s, want bool", v.Type().TypeName())
	}
	return bool(b), nil
}

package checkers

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

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
	// function sum(list) (of ints, or of numbers as a double):
	// "sum(values) == 0", "sum(states.transformList(k, v, v.balance)) == 0".
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

// MaxInvariantFindings bounds the per-key findings one invariant reports in
// one check; the last finding says how many more keys fail it.
const MaxInvariantFindings = 100

// CompileInvariants compiles the invariants of the named derivation. Each
// must have a name, exactly one expression, and give a bool; an error is
// an *InvariantError, placed in the YAML the specs were read from.
func CompileInvariants(derivation string, specs []InvariantSpec) (*Invariants, error) {
	base, err := cel.NewEnv(
		cel.CrossTypeNumericComparisons(true), cel.OptionalTypes(),
		ext.Strings(), ext.Math(), ext.Lists(), ext.Sets(), ext.Bindings(), ext.TwoVarComprehensions(),
		cel.Function("sum", cel.Overload("sum_list", []*cel.Type{cel.ListType(cel.DynType)}, cel.DynType,
			cel.UnaryBinding(celSum))),
	)
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
		prg, err := env.Program(ast, cel.CostLimit(1_000_000))
		if err != nil {
			return nil, fail(s.exprPos, "%v", err)
		}
		*dst = append(*dst, compiledInvariant{name: s.Name, expr: expr, prg: prg})
	}
	return iv, nil
}

// Check evaluates the invariants over states, the derivation's state after
// a run (each key's exported value, in key order), and returns a finding of
// kind invariant for each key a per-key invariant fails on (at most
// MaxInvariantFindings per invariant, the last counting the rest) and for
// each all-keys invariant that fails. An expression that cannot be
// evaluated on a state (a missing field, a type it does not take) fails
// it: the invariant claims to hold for every state. The finding's Log is
// the derivation's name; a per-key finding's Key is the key.
func (iv *Invariants) Check(states iter.Seq2[string, any]) []Finding {
	var out []Finding
	failed := make([]int, len(iv.perKey))
	var all map[string]any
	var values []any
	if len(iv.all) > 0 {
		all = map[string]any{}
	}
	found := func(inv compiledInvariant, key, detail string) {
		out = append(out, Finding{Log: iv.derivation, Kind: ledger.IntegrityInvariant, Key: key,
			Detail: fmt.Sprintf("invariant %s (%s): %s", inv.name, inv.expr, detail)})
	}
	for key, state := range states {
		if all != nil {
			all[key] = state
			values = append(values, state)
		}
		for i, inv := range iv.perKey {
			ok, err := evalBool(inv.prg, map[string]any{"key": key, "state": state})
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
	for _, inv := range iv.all {
		if values == nil {
			values = []any{}
		}
		ok, err := evalBool(inv.prg, map[string]any{"states": all, "values": values, "count": int64(len(values))})
		switch {
		case err != nil:
			found(inv, "", fmt.Sprintf("over %s: cannot be evaluated: %v", plural.N(len(values), "key", "keys"), err))
		case !ok:
			found(inv, "", "false over "+plural.N(len(values), "key", "keys"))
		}
	}
	return out
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

var errSum = errors.New("sum: not a number")

// celSum adds a list of numbers: ints to an int (an error on overflow),
// otherwise, with a double or uint among them, to a double.
func celSum(v ref.Val) ref.Val {
	l, ok := v.(traits.Lister)
	if !ok {
		return types.NewErr("sum: not a list")
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

// InvariantTarget is a derivation and its invariants.
type InvariantTarget struct {
	Derivation fold.Derivation
	Invariants *Invariants
	// Lineage is how many of the last entries applied to a key a per-key
	// finding carries, with their inclusion proofs (the derivation spec's
	// lineage); 0: none.
	Lineage int
}

// InvariantCheck checks derivations' invariants over their latest saved
// results (name "invariants"): the state the daemon's last run of each
// derivation saved in the bucket, each key's state exported as the
// derived store is compared with. A derivation that has not saved a result
// yet is skipped; a result that cannot be read or exported is an error of
// the pass.
//
// A per-key finding names its key and, with a ledger to read, carries the
// key's lineage: the last entries applied to it up to the result's pins,
// each with its inclusion proof in the signed checkpoint the result was
// pinned at (see attachLineage).
type InvariantCheck struct {
	bucket   *ledger.Bucket
	ledger   rederive.Ledger
	verifier note.Verifier
	targets  []InvariantTarget
}

var _ Checker = (*InvariantCheck)(nil)

// NewInvariantCheck returns the invariant check of targets, whose results
// the derivation runner saves in bucket, read from lg (the lineage of
// failing keys; nil: findings without lineage), whose signed checkpoints
// (the lineage's evidence) verify with v.
func NewInvariantCheck(bucket *ledger.Bucket, lg rederive.Ledger, v note.Verifier, targets []InvariantTarget) *InvariantCheck {
	return &InvariantCheck{bucket: bucket, ledger: lg, verifier: v, targets: targets}
}

// Name implements Checker.
func (c *InvariantCheck) Name() string { return "invariants" }

// Run implements Checker.
func (c *InvariantCheck) Run(ctx context.Context, p Progress) error {
	var errs []error
	for _, t := range c.targets {
		name := t.Derivation.Name()
		res, err := fold.LoadResult(c.bucket, t.Derivation)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("invariants: %s: %w", name, err)
		}
		keys := slices.Sorted(maps.Keys(res.States))
		var exportErr error
		states := func(yield func(string, any) bool) {
			for _, k := range keys {
				v, err := fold.Export(t.Derivation, k, res.States[k])
				if err != nil {
					exportErr = fmt.Errorf("invariants: %s: export key %q: %w", name, k, err)
					return
				}
				if !yield(k, v) {
					return
				}
			}
		}
		fs := t.Invariants.Check(states)
		if exportErr != nil {
			return exportErr
		}
		if c.ledger != nil && t.Lineage > 0 {
			// Without its lineage a finding still stands; the pass fails.
			if err := attachLineage(ctx, c.ledger, c.verifier, t, res, fs); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				errs = append(errs, fmt.Errorf("invariants: %s: lineage: %w", name, err))
			}
		}
		for _, f := range fs {
			p.Found(f)
		}
		if err := p.Checked(ctx, len(keys)); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// FindingKinds are the kinds an invariant check reports.
func (c *InvariantCheck) FindingKinds() []string { return []string{ledger.IntegrityInvariant} }

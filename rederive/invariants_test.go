package rederive_test

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

// sorted yields m's keys in order with their values.
func sorted(m map[string]any) iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// TestInvariants: per-key and all-keys invariants over exported states
// (ints, doubles, objects) find exactly the keys and aggregates that fail,
// a state an expression cannot evaluate fails it, and per-key findings are
// bounded with a count of the rest.
func TestInvariants(t *testing.T) {
	iv, err := rederive.CompileInvariants("balances", []rederive.InvariantSpec{
		{Name: "non_negative", PerKey: "state >= 0"},
		{Name: "sum_zero", All: "sum(values) == 0"},
		{Name: "few", All: "count <= 3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(states map[string]any) []string {
		var got []string
		for _, f := range iv.Check(sorted(states)) {
			if f.Derivation != "balances" {
				t.Fatalf("finding %v", f)
			}
			got = append(got, f.Detail)
		}
		return got
	}
	if got := check(map[string]any{"a": int64(5), "b": int64(-5), "c": 0.0}); len(got) != 1 || !strings.Contains(got[0], `non_negative`) || !strings.Contains(got[0], `key "b"`) {
		t.Fatalf("one negative key: %q", got)
	}
	if got := check(map[string]any{"a": int64(5), "b": 1.5}); len(got) != 1 || !strings.Contains(got[0], "sum_zero") {
		t.Fatalf("sum 6.5: %q", got)
	}
	if got := check(map[string]any{}); len(got) != 0 {
		t.Fatalf("no keys: %q", got)
	}
	if got := check(map[string]any{"a": "x"}); len(got) != 2 || !strings.Contains(got[0], "cannot be evaluated") || !strings.Contains(got[1], "sum_zero") {
		t.Fatalf("a string state: %q", got)
	}
	many := map[string]any{}
	for i := range rederive.MaxInvariantFindings + 50 {
		many[fmt.Sprintf("k%04d", i)] = int64(-1)
	}
	got := check(many)
	// 100 keys, "and 50 more", the sum and the count.
	if len(got) != rederive.MaxInvariantFindings+3 || !strings.Contains(got[rederive.MaxInvariantFindings], "and 50 more keys") {
		t.Fatalf("%d findings, the 101st %q", len(got), got[min(len(got)-1, rederive.MaxInvariantFindings)])
	}

	objects, err := rederive.CompileInvariants("accounts", []rederive.InvariantSpec{
		{Name: "balance", PerKey: "state.balance >= state.limit"},
		{Name: "total", All: "sum(states.transformList(k, v, v.balance)) == 100"},
	})
	if err != nil {
		t.Fatal(err)
	}
	acc := map[string]any{
		"x": map[string]any{"balance": int64(120), "limit": int64(0)},
		"y": map[string]any{"balance": int64(-20), "limit": int64(-50)},
	}
	if fs := objects.Check(sorted(acc)); len(fs) != 0 {
		t.Fatalf("good accounts: %v", fs)
	}
	acc["z"] = map[string]any{"balance": int64(-1), "limit": int64(0)}
	if fs := objects.Check(sorted(acc)); len(fs) != 2 || !strings.Contains(fs[0].Detail, `key "z"`) || !strings.Contains(fs[1].Detail, "total") {
		t.Fatalf("z overdrawn: %v", fs)
	}
	acc["z"] = map[string]any{"limit": int64(0)}
	if fs := objects.Check(sorted(acc)); len(fs) != 2 || !strings.Contains(fs[0].Detail, "cannot be evaluated") {
		t.Fatalf("z without balance: %v", fs)
	}
}

// TestInvariantSum: sum overflows are errors (so the invariant fails),
// not wrapped values; mixed ints and doubles sum as doubles.
func TestInvariantSum(t *testing.T) {
	iv, err := rederive.CompileInvariants("d", []rederive.InvariantSpec{{Name: "nonneg_total", All: "sum(values) >= 0"}})
	if err != nil {
		t.Fatal(err)
	}
	big := int64(1 << 62)
	if fs := iv.Check(sorted(map[string]any{"a": big, "b": big})); len(fs) != 1 || !strings.Contains(fs[0].Detail, "overflow") {
		t.Fatalf("overflow: %v", fs)
	}
	if fs := iv.Check(sorted(map[string]any{"a": int64(-1), "b": 0.5, "c": int64(1)})); len(fs) != 0 {
		t.Fatalf("mixed: %v", fs)
	}
}

// TestInvariantSpecErrors: no name, a name twice, both or neither
// expression, a syntax error, an unknown variable, a non-bool result.
func TestInvariantSpecErrors(t *testing.T) {
	for _, s := range [][]rederive.InvariantSpec{
		{{PerKey: "state >= 0"}},
		{{Name: "a", PerKey: "state >= 0"}, {Name: "a", All: "count > 0"}},
		{{Name: "a", PerKey: "state >= 0", All: "count > 0"}},
		{{Name: "a"}},
		{{Name: "a", PerKey: "state >="}},
		{{Name: "a", PerKey: "states.size() > 0"}},
		{{Name: "a", All: "state >= 0"}},
		{{Name: "a", All: "count + 1"}},
	} {
		if _, err := rederive.CompileInvariants("d", s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

// TestInvariantDecimalState checks invariants over a derivation whose
// state is a decimal, through CheckResult: a decimal state compares with
// numbers and sums exactly as in the derivation, so money that is not
// negative raises nothing (both directions: the negative key is found,
// with its state as exported), and an exact sum of cents holds where a
// sum in doubles would not. A value expression that fails on a key's
// state is an error of the check, naming the key, with no findings.
func TestInvariantDecimalState(t *testing.T) {
	specs, err := spec.Parse("bal.yaml", []byte(`derivations:
  - name: bal
    sources: [pay]
    store: {file: {path: x.jsonl}}
    key: event.k
    initial: 'key.startsWith("neg") ? decimal("-0.30") : key.startsWith("a") ? decimal("0.10") : decimal("0.20")'
    step: state + 1
`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := spec.Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	result := func(keys ...string) *fold.Result {
		r := &fold.Result{Derivation: "bal", States: map[string]fold.State{}}
		for _, k := range keys {
			s, err := d.Initial(k)
			if err != nil {
				t.Fatal(err)
			}
			r.States[k] = s
		}
		return r
	}
	iv, err := rederive.CompileInvariants("bal", []rederive.InvariantSpec{
		{Name: "non_negative", PerKey: "state >= 0"},
		{Name: "exact", All: "sum(values) == 0"},
		{Name: "cents", PerKey: "state.scale() == 2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := iv.CheckResult(d, result("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Key != "" || !strings.Contains(fs[0].Detail, "invariant exact (sum(values) == 0): false over 2 keys") {
		t.Fatalf("0.10 and 0.20: %+v", fs)
	}
	fs, err = iv.CheckResult(d, result("a", "b", "neg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Key != "neg" || fs[0].Derivation != "bal" ||
		fs[0].Detail != `invariant non_negative (state >= 0): key "neg": false for state -0.30` {
		t.Fatalf("0.10, 0.20 and -0.30: %+v", fs)
	}

	specs, err = spec.Parse("v.yaml", []byte(`derivations:
  - name: v
    sources: [pay]
    store: {file: {path: x.jsonl}}
    key: event.k
    initial: 'key == "bad" ? 0 : 1'
    step: state + 1
    value: 'state > 0 ? state : {"a": 1}["b"]'
`))
	if err != nil {
		t.Fatal(err)
	}
	if d, err = spec.Compile(specs[0]); err != nil {
		t.Fatal(err)
	}
	if fs, err := iv.CheckResult(d, result("a", "bad")); err == nil || fs != nil || !strings.Contains(err.Error(), `export key "bad"`) {
		t.Fatalf("a value that fails on one key: %v, %v", fs, err)
	}
}

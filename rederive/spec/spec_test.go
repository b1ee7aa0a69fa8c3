package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// specErrs flattens a joined error into its *Errors.
func specErrs(t *testing.T, err error) []*Error {
	t.Helper()
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var se *Error
		if !errors.As(err, &se) {
			t.Fatalf("error %v (%T) is not a *SpecError", err, err)
		}
		out = append(out, se)
	}
	walk(err)
	return out
}

const validSpecYAML = `derivations:
  - name: balances
    sources: [payments.*, transfers-http]
    filter: event.type == "transfer"
    key: '[event.from, event.to]'
    initial: "0"
    step: 'key == event.from ? state - event.amount : state + event.amount'
    store:
      postgres:
        dsn: postgres://localhost/app
        query: SELECT account, balance FROM balances
    compare:
      tolerance: {"": 0.01}
  - name: counts.by-type
    sources: [payments.0]
    key: event.type
    initial: "0"
    step: state + 1
    grace: 5m
    confirm_runs: 1
    lineage: 0
    error_budget: 0
    interval: 30s
    full_interval: 2h
    severity: critical
    store:
      redis: {pattern: "count:*", prefix: "count:", type: string}
`

func TestSpecParseValid(t *testing.T) {
	specs, err := Parse("derivations.yaml", []byte(validSpecYAML))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 {
		t.Fatalf("got %d specs, want 2", len(specs))
	}
	a, b := specs[0], specs[1]
	if a.Name != "balances" || a.File != "derivations.yaml" || a.Line != 2 {
		t.Errorf("spec 0: name %q file %q line %d", a.Name, a.File, a.Line)
	}
	if !reflect.DeepEqual(a.Sources, []string{"payments.*", "transfers-http"}) {
		t.Errorf("sources = %q", a.Sources)
	}
	// Defaults.
	if a.Decode != "json" || a.Grace != store.Duration(time.Minute) || a.ConfirmRuns != 2 || a.Lineage != 5 ||
		a.ErrorBudget != 100 || a.Interval != store.Duration(time.Minute) || a.FullInterval != store.Duration(time.Hour) ||
		a.Severity != "warning" {
		t.Errorf("defaults: %+v", a)
	}
	if a.Store.Postgres == nil || a.Store.Postgres.Query == "" || a.Compare.Tolerance[""] != 0.01 {
		t.Errorf("store/compare: %+v %+v", a.Store, a.Compare)
	}
	// Explicit zeros stay zero.
	if b.Grace != store.Duration(5*time.Minute) || b.ConfirmRuns != 1 || b.Lineage != 0 || b.ErrorBudget != 0 ||
		b.Interval != store.Duration(30*time.Second) || b.FullInterval != store.Duration(2*time.Hour) || b.Severity != "critical" {
		t.Errorf("explicit settings: %+v", b)
	}
	if b.Store.Redis == nil || b.Store.Redis.Type != "string" || b.Store.Redis.Prefix != "count:" {
		t.Errorf("redis: %+v", b.Store.Redis)
	}
	for _, s := range specs {
		if _, err := Compile(s); err != nil {
			t.Errorf("Compile(%s): %v", s.Name, err)
		}
	}
}

func TestSpecErrorString(t *testing.T) {
	y := `derivations:
  - name: balances
    sources: [payments.*]
    key: event.account
    initial: "0"
    step: state + event.amount + stat
    store: {file: {path: b.jsonl}}
`
	_, err := Parse("derivations.yaml", []byte(y))
	want := `derivations.yaml:6:34: derivation "balances": step: ERROR: <input>:1:24: undeclared reference to 'stat'`
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got %v\nwant %s", err, want)
	}
}

func TestSpecErrors(t *testing.T) {
	const st = "    store: {file: {path: b.jsonl}}\n"
	tests := []struct {
		name string
		yaml string
		want []string // "line:col field: message prefix"
	}{{
		name: "bad yaml",
		yaml: "derivations:\n  - name: a\n   bad: 1\n",
		want: []string{"1:0 : did not find expected '-' indicator"},
	}, {
		name: "not a mapping",
		yaml: "- a\n- b\n",
		want: []string{`1:1 : want a mapping with a "derivations" list, got a list`},
	}, {
		name: "empty",
		yaml: "# nothing\n",
		want: []string{`0:0 : empty file`},
	}, {
		name: "unknown top-level field",
		yaml: "derivations: []\nversion: 2\n",
		want: []string{`2:1 : unknown field "version"`},
	}, {
		name: "unknown field",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    stepp: state + 1\n" + st,
		want: []string{`7:5 : unknown field "stepp" (did you mean "step"?)`},
	}, {
		name: "unknown nested field",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      postgres: {dns: x, table: t}\n",
		want: []string{
			`8:17 store.postgres.dsn: missing dsn`,
			`8:18 store.postgres: unknown field "dns" (did you mean "dsn"?)`,
		},
	}, {
		name: "unknown deleted rule",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    compare: {deleted: nul}\n" + st,
		want: []string{`7:24 compare.deleted: `},
	}, {
		name: "missing step",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n" + st,
		want: []string{`2:5 step: missing step expression`},
	}, {
		name: "missing everything",
		yaml: "derivations:\n  - {}\n",
		want: []string{
			`2:5 name: missing name`,
			`2:5 sources: missing sources`,
			`2:5 key: missing key expression`,
			`2:5 initial: missing initial expression`,
			`2:5 step: missing step expression`,
			`2:5 store: missing store`,
		},
	}, {
		name: "undeclared variable in step",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state + event.amount * rate\n" + st,
		want: []string{`6:34 step: ERROR: <input>:1:24: undeclared reference to 'rate'`},
	}, {
		name: "undeclared variable in quoted step",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: \"state + \\\"x\\\" + stat\"\n" + st,
		want: []string{`6:28 step: ERROR: <input>:1:15: undeclared reference to 'stat'`},
	}, {
		name: "undeclared variable in literal block",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: |\n      state +\n        evnt.amount\n" + st,
		want: []string{`8:9 step: ERROR: <input>:2:3: undeclared reference to 'evnt'`},
	}, {
		name: "undeclared variable in folded block",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: >\n      state +\n      evnt.amount\n" + st,
		want: []string{`8:7 step: ERROR: <input>:1:9: undeclared reference to 'evnt'`},
	}, {
		name: "key not available in filter",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    filter: key != ''\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:13 filter: ERROR: <input>:1:1: undeclared reference to 'key'`},
	}, {
		name: "syntax error",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state +\n" + st,
		want: []string{`6:18 step: ERROR: <input>:1:8: Syntax error`},
	}, {
		name: "filter not bool",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    filter: size(event.memo)\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:13 filter: filter must give a bool, got int`},
	}, {
		name: "key not string",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: size(event.memo)\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:10 key: key must give a string or a list of strings, got int`},
	}, {
		name: "key list of ints",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: '[1, 2]'\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:10 key: key must give a string or a list of strings, got list(int)`},
	}, {
		name: "unquoted list key",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: [event.from, event.to]\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:10 key: want a CEL expression (a string; quote`},
	}, {
		name: "now is not defined",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: now()\n" + st,
		want: []string{`6:14 step: ERROR: <input>:1:4: undeclared reference to 'now'`},
	}, {
		name: "initial cannot see event",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: event.x\n    step: state\n" + st,
		want: []string{`5:14 initial: ERROR: <input>:1:1: undeclared reference to 'event'`},
	}, {
		name: "initial fails",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: 1 / 0\n    step: state\n" + st,
		want: []string{`5:14 initial: division by zero`},
	}, {
		name: "bad glob",
		yaml: "derivations:\n  - name: a\n    sources: [ok, \"pay[\"]\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`3:19 sources[1]: bad pattern "pay[": syntax error in pattern`},
	}, {
		name: "sources not a list",
		yaml: "derivations:\n  - name: a\n    sources: payments\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`3:14 sources: want a list, got "payments"`},
	}, {
		name: "bad name",
		yaml: "derivations:\n  - name: Balances\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`2:11 name: invalid name "Balances"`},
	}, {
		name: "bad decode",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    decode: xml\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`4:13 decode: unknown decode "xml"`},
	}, {
		name: "two stores",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      postgres: {dsn: x, table: t}\n      redis: {pattern: 'b:*'}\n",
		want: []string{`8:7 store: set only one of postgres, redis, file, http (got postgres and redis)`},
	}, {
		name: "no store",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n",
		want: []string{`2:5 store: missing store`},
	}, {
		name: "store requirements",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      postgres: {dsn: x, table: t, query: q}\n" +
			"  - name: b\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      redis: {type: list}\n" +
			"  - name: c\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      file: {format: xml}\n" +
			"  - name: d\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      http: {format: xml}\n" +
			"  - name: e\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store:\n      postgres: {dsn: x}\n",
		want: []string{
			`8:33 store.postgres.table: set query or table, not both`,
			`15:14 store.redis.pattern: missing pattern`,
			`15:21 store.redis.type: unknown type "list"`,
			`22:13 store.file.path: missing path`,
			`22:22 store.file.format: unknown format "xml"`,
			`29:13 store.http.url: missing url`,
			`29:22 store.http.format: unknown format "xml"`,
			`36:17 store.postgres: set query or table`,
		},
	}, {
		name: "settings out of range",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n" + st +
			"    compare: {tolerance: {amount: -1}}\n    grace: -1s\n    confirm_runs: 0\n    lineage: -1\n    error_budget: -2\n    interval: 1h\n    full_interval: 1m\n    severity: page\n",
		want: []string{
			`8:35 compare.tolerance.amount: tolerance -1 for "amount"`,
			`9:12 grace: grace must be >= 0`,
			`10:19 confirm_runs: confirm_runs must be >= 1, got 0`,
			`11:14 lineage: lineage must be >= 0`,
			`12:19 error_budget: error_budget must be >= 0`,
			`14:20 full_interval: full_interval (1m0s) must be >= interval (1h0m0s)`,
			`15:15 severity: severity must be critical, warning or info, got "page"`,
		},
	}, {
		name: "bad scalars",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n" + st +
			"    grace: soon\n    confirm_runs: many\n    compare: {ignore_extra: maybe}\n",
		want: []string{
			`8:12 grace: want a duration such as "30s": time: invalid duration "soon"`,
			`9:19 confirm_runs: want an integer, got "many"`,
			`10:29 compare.ignore_extra: want true or false, got "maybe"`,
		},
	}, {
		name: "duplicate names",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n" + st +
			"  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{`8:11 name: duplicate name "a" (first declared at line 2)`},
	}, {
		name: "duplicate field",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    step: state\n" + st,
		want: []string{`7:5 step: already set at line 6`},
	}, {
		name: "errors from several derivations",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: stat\n" + st +
			"  - name: b\n    sources: [l]\n    key: evnt.k\n    initial: '0'\n    step: state\n" + st,
		want: []string{
			`6:11 step: ERROR: <input>:1:1: undeclared reference to 'stat'`,
			`10:10 key: ERROR: <input>:1:1: undeclared reference to 'evnt'`,
		},
	}, {
		name: "value reads event",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    value: state + event.x\n" + st,
		want: []string{`7:20 value: ERROR: <input>:1:9: undeclared reference to 'event'`},
	}, {
		name: "all_keys without step_all",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    all_keys: event.op == 't'\n" + st,
		want: []string{`7:15 all_keys: all_keys needs step_all`},
	}, {
		name: "step_all without all_keys",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    step_all: 'null'\n" + st,
		want: []string{`7:15 step_all: step_all needs all_keys`},
	}, {
		name: "all_keys not bool",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    all_keys: size(event.op)\n    step_all: state\n" + st,
		want: []string{`7:15 all_keys: all_keys must give a bool, got int`},
	}, {
		name: "step_all reads an unknown name",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    all_keys: event.op == 't'\n    step_all: stat\n" + st,
		want: []string{`8:15 step_all: ERROR: <input>:1:1: undeclared reference to 'stat'`},
	}, {
		name: "value is a list",
		yaml: "derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    value: [state]\n" + st,
		want: []string{`7:12 value: want a CEL expression`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := Parse("d.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error; specs %+v", specs)
			}
			if specs != nil {
				t.Errorf("specs returned with an error")
			}
			errs := specErrs(t, err)
			var got []string
			for _, e := range errs {
				if e.File != "d.yaml" {
					t.Errorf("file %q", e.File)
				}
				got = append(got, fmt.Sprintf("%d:%d %s: %s", e.Line, e.Column, e.Field, e.Msg))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s...", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestSpecMergeKeysAndAliases(t *testing.T) {
	y := `x-store: &pg
  postgres: {dsn: "postgres://x", table: t}
derivations:
  - &base
    name: a
    sources: [l]
    key: event.k
    initial: "0"
    step: state + 1
    store: *pg
  - <<: *base
    name: b
`
	// x-store is an unknown top-level field: anchors must live inside
	// derivations. Check that error, then the same without it.
	if _, err := Parse("d.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), `unknown field "x-store"`) {
		t.Fatalf("err = %v", err)
	}
	y = `derivations:
  - &base
    name: a
    sources: [l]
    key: event.k
    initial: "0"
    step: state + 1
    store:
      postgres: {dsn: "postgres://x", table: t}
  - <<: *base
    name: b
`
	specs, err := Parse("d.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].Name != "b" || specs[1].Step != "state + 1" || specs[1].Store.Postgres == nil {
		t.Fatalf("merged spec: %+v", specs[1])
	}
}

func TestSpecAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("derivations:\n  - name: x\n    sources: *a11\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestSpecLoad(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	one := "derivations:\n  - name: same\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store: {file: {path: x.jsonl}}\n"
	two := "derivations:\n  - name: other\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store: {file: {path: x.jsonl}}\n" +
		"  - name: same\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: state\n    store: {file: {path: x.jsonl}}\n"
	if err := os.WriteFile(a, []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := Load(a)
	if err != nil || len(specs) != 1 || specs[0].File != a {
		t.Fatalf("LoadSpecs(a) = %v, %v", specs, err)
	}
	_, err = Load(a, b)
	errs := specErrs(t, err)
	if len(errs) != 1 || errs[0].File != b || errs[0].Line != 8 || errs[0].Column != 11 ||
		!strings.Contains(errs[0].Msg, fmt.Sprintf(`duplicate name "same" (first declared at %s:2)`, a)) {
		t.Fatalf("LoadSpecs(a, b) error = %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("missing file: no error")
	}
}

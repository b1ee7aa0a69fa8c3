package spec

import (
	"fmt"
	"testing"
)

// FuzzParseSpecs checks that Parse never panics, that every error it
// returns is placed in the file, and that the specs it accepts compile.
func FuzzParseSpecs(f *testing.F) {
	f.Add([]byte(validSpecYAML))
	f.Add([]byte(fuzzSumByKeySpec))
	f.Add([]byte(fmt.Sprintf(mirrorSpec, mirrorAllKeys)))
	f.Add([]byte("derivations:\n  - name: a\n    sources: [l.*]\n    key: event.k\n    initial: '0'\n    step: state\n    step_all: stat\n    value: '{\"k\": key}'\n    commutative: yes\n    store: {file: {path: b}}\n"))
	f.Add([]byte("derivations:\n  - name: a\n    sources: [l]\n    key: event.k\n    initial: '0'\n    step: |\n      state +\n        evnt.amount\n    store: {file: {path: b}}\n"))
	f.Add([]byte("derivations:\n  - &b\n    name: a\n    sources: ['p[']\n    key: >\n      event.k +\n      1\n    initial: \"\\u00e9\"\n    step: \"state + \\\"x\\\" + stat\"\n  - <<: *b\n    name: b\n"))
	f.Add([]byte("derivations: [{name: x, store: {postgres: {dsn: a, query: q, table: t}, redis: {}}, compare: {tolerance: {a: -1}}}]"))
	f.Add([]byte("derivations:\n- name: é\n  sources: [\"\\t\"]\n  filter: '\"\\u00e9\" == \"x'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := Parse("f.yaml", data)
		if err != nil {
			if specs != nil {
				t.Fatal("specs and an error")
			}
			for _, e := range specErrs(t, err) {
				if e.File != "f.yaml" || e.Line < 0 || e.Column < 0 || e.Msg == "" {
					t.Fatalf("badly placed error %#v", e)
				}
				_ = e.Error()
			}
			return
		}
		for _, s := range specs {
			if _, err := Compile(s); err != nil {
				t.Fatalf("parsed spec %q does not compile: %v", s.Name, err)
			}
		}
	})
}

// fuzzSumByKeySpec is a seed: a CEL sum by key (as the cel benchmarks use).
const fuzzSumByKeySpec = `
derivations:
  - name: balances
    sources: [payments.*]
    filter: event.type == "transfer"
    key: '[event.from, event.to]'
    initial: "0"
    step: 'key == event.from ? state - event.amount : state + event.amount'
    store:
      file: {path: balances.jsonl}
`

package spec

import (
	"fmt"
	"strings"
	"testing"
)

func TestSpecWarnings(t *testing.T) {
	const st = "    store: {file: {path: b.jsonl}}\n"
	for _, c := range []struct {
		name, fields string
		want         []string // "line:col field", in order
	}{
		{"one log, any step", "sources: [orders]\n    initial: 'null'\n    step: event\n", nil},
		{"a pattern, latest value", "sources: [orders.*]\n    initial: 'null'\n    step: event\n", []string{"6:11 step"}},
		{"two logs, latest value", "sources: [a, b]\n    initial: 'null'\n    step: event\n", []string{"6:11 step"}},
		{"declared commutative", "sources: [a, b]\n    initial: 'null'\n    step: event\n    commutative: true\n", nil},
		{"a sum", "sources: [a.*]\n    initial: '0'\n    step: state + event.amount\n", nil},
		{"a count", "sources: [a.*]\n    initial: '0u'\n    step: state + 1u\n", nil},
		{"a decimal sum", "sources: [a.*]\n    initial: 'decimal(\"0.00\")'\n    step: state + decimal(event.amount)\n", nil},
		{"transfers", "sources: [a.*]\n    initial: '0'\n    step: 'key == event.from ? state - event.amount : event.kind == \"x\" ? state : state + event.amount'\n", nil},
		{"a double sum", "sources: [a.*]\n    initial: '0.0'\n    step: state + event.amount\n", []string{"6:11 step"}},
		{"term reads state", "sources: [a.*]\n    initial: '0'\n    step: state + state\n", []string{"6:11 step"}},
		{"subtracted from", "sources: [a.*]\n    initial: '0'\n    step: event.amount - state\n", []string{"6:11 step"}},
		{"condition reads state", "sources: [a.*]\n    initial: '0'\n    step: 'state > 10 ? state : state + 1'\n", []string{"6:11 step"}},
		{"all_keys", "sources: [a.*]\n    initial: '0'\n    step: state + 1\n    all_keys: event.op == 't'\n    step_all: '0'\n",
			[]string{"7:15 all_keys"}},
		{"all_keys declared", "sources: [a.*]\n    initial: '0'\n    step: state + 1\n    all_keys: event.op == 't'\n    step_all: '0'\n    commutative: true\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := "derivations:\n  - name: a\n    key: event.k\n    " + c.fields + st
			specs, err := Parse("w.yaml", []byte(y))
			if err != nil {
				t.Fatalf("%v\n%s", err, y)
			}
			var got []string
			for _, w := range specs[0].Warnings() {
				got = append(got, fmt.Sprintf("%d:%d %s", w.Line, w.Column, w.Field))
				if !strings.HasPrefix(w.String(), fmt.Sprintf("w.yaml:%d:%d: derivation \"a\": %s: reads several logs", w.Line, w.Column, w.Field)) ||
					!strings.Contains(w.String(), "log-name order") || !strings.Contains(w.String(), "commutative: true") {
					t.Errorf("warning text: %s", w)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("warnings %v, want %v", got, c.want)
			}
		})
	}
	// Warnings of several specs, in order; a Spec built in Go has them too.
	s := &Spec{Name: "go", Sources: []string{"x", "y"}, Key: "event.k", Initial: "null", Step: "event"}
	if ws := Warnings([]*Spec{s, s}); len(ws) != 2 || ws[0].Derivation != "go" {
		t.Fatalf("Warnings: %v", ws)
	}
}

package rederive

import (
	"strings"
	"testing"
)

// Item 3: alias cycles and deep nesting are errors with a position, not a
// stack overflow (which kills the process; no recover can catch it).
func TestParseSpecsAliasCycles(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"self merge", "derivations:\n  - &b\n    <<: *b\n    name: b\n", "alias cycle"},
		{"self merge in a list", "derivations:\n  - &b\n    <<: [*b]\n    name: b\n", "alias cycle"},
		{"mutual merge", "x: &a\n  <<: *c\nderivations:\n  - &c\n    <<: *a\n    name: b\n", ""},
		{"merge cycle in the top mapping", "&t\n<<: *t\nderivations: []\n", "alias cycle"},
		{"value cycle", "derivations:\n  - &b\n    name: b\n    source: {log: x}\n    params: {x: *b}\n", ""},
		{"sequence cycle", "derivations: &l\n  - *l\n", ""},
		{"deep nesting", "derivations:\n  - name: b\n    params: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSpecs("c.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

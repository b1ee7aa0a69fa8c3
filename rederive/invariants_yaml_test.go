package rederive_test

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/rederive"
)

// TestInvariantErrorPosition: an invariant read from YAML that does not
// compile is placed at the line and column of the offending token of its
// expression (plain, single- and double-quoted scalars), at the
// expression's start where the YAML hides the token's column (a block
// scalar), and at its mapping for an error that is not the expression's.
func TestInvariantErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line, col  int
	}{
		// "state >= " has its error at the end of the input.
		{"plain", "- name: ok\n  per_key: state >= 0\n- name: bad\n  per_key: state >= stat\n", 4, 21},
		{"single quoted", "- name: bad\n  all:   'sum(valuez) == 0'\n", 2, 15},
		{"double quoted", "- {name: bad, per_key: \"size(key) > 1 && stat > 0\"}\n", 1, 42},
		{"block", "- name: bad\n  per_key: |\n    state >= 0 &&\n    stat\n", 2, 12},
		{"no expression", "- name: none\n", 1, 3},
		{"not bool", "- name: n\n\n  all: count + 1\n", 3, 8},
	} {
		var specs []rederive.InvariantSpec
		if err := yaml.Unmarshal([]byte(tc.yaml), &specs); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, err := rederive.CompileInvariants("bal", specs)
		var ie *rederive.InvariantError
		if !errors.As(err, &ie) {
			t.Fatalf("%s: error %v, want an InvariantError", tc.name, err)
		}
		if ie.Line != tc.line || ie.Column != tc.col {
			t.Errorf("%s: placed at %d:%d, want %d:%d (%v)", tc.name, ie.Line, ie.Column, tc.line, tc.col, err)
		}
		ie.File = "auditd.yaml"
		if want := "auditd.yaml:"; !strings.HasPrefix(ie.Error(), want) {
			t.Errorf("%s: %q", tc.name, ie.Error())
		}
	}
}

// TestInvariantSpecYAMLFields: an unknown field, or an expression that is
// not a string, is refused when the YAML is read.
func TestInvariantSpecYAMLFields(t *testing.T) {
	for _, y := range []string{
		"- name: a\n  per_kee: state >= 0\n",
		"- name: a\n  per_key: [state]\n",
		"- just a string\n",
	} {
		var specs []rederive.InvariantSpec
		if err := yaml.Unmarshal([]byte(y), &specs); err == nil {
			t.Errorf("%q: no error", y)
		} else if strings.Contains(err.Error(), "rederive.") {
			t.Errorf("%q: %v names a Go type", y, err)
		}
	}
}

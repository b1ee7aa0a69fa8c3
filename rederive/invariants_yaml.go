package rederive

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// InvariantError is an invariant that does not compile, placed, when the
// spec was read from YAML, at the file, line and column it concerns: for a
// CEL error the offending token inside the expression where the YAML
// allows placing it (a one-line plain or quoted scalar without escapes),
// else the expression's first character; for other errors the invariant's
// mapping.
type InvariantError struct {
	File         string // set by the caller that read the file
	Line, Column int    // 1-based; 0 when unknown
	Derivation   string
	Invariant    string
	Msg          string
}

func (e *InvariantError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d:%d: ", e.Line, e.Column)
	}
	if e.Invariant != "" {
		fmt.Fprintf(&b, "invariant %s of %s: ", e.Invariant, e.Derivation)
	} else {
		fmt.Fprintf(&b, "invariant of %s: ", e.Derivation)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// yamlPos is where a YAML node starts, and for a scalar how its value maps
// to the file's columns.
type yamlPos struct {
	line, column int
	// exact: the value is the text from column on (after an opening
	// quote), on one line, rune for rune.
	exact bool
}

// at returns the file position of the expression's (1-based line, 0-based
// column, as CEL reports them) position.
func (p yamlPos) at(line, col int) (int, int) {
	if p.line == 0 {
		return 0, 0
	}
	if !p.exact || line != 1 || col < 0 {
		return p.line, p.column + col
	}
	return p.line, p.column + col
}

func scalarPos(n *yaml.Node) yamlPos {
	p := yamlPos{line: n.Line, column: n.Column}
	v := n.Value
	if strings.ContainsAny(v, "\n\r\t") {
		return p
	}
	switch n.Style {
	case 0: // plain
		p.exact = true
	case yaml.SingleQuotedStyle:
		p.column++
		p.exact = !strings.Contains(v, "'")
	case yaml.DoubleQuotedStyle:
		p.column++
		// Escapes make the value shorter than its source text.
		p.exact = !strings.ContainsAny(v, "\"\\") && isPrintableASCII(v)
	}
	return p
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// UnmarshalYAML decodes an invariant and records the positions of its
// mapping and expressions, for InvariantError. Unknown fields are errors.
func (s *InvariantSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: an invariant is a mapping of name and per_key or all, not %s", n.Line, n.Tag)
	}
	*s = InvariantSpec{pos: yamlPos{line: n.Line, column: n.Column}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var dst *string
		switch k.Value {
		case "name":
			dst = &s.Name
		case "per_key":
			dst, s.exprPos = &s.PerKey, scalarPos(v)
		case "all":
			dst, s.exprPos = &s.All, scalarPos(v)
		default:
			return fmt.Errorf("line %d: unknown invariant field %q (want name, and per_key or all)", k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: invariant field %s must be a string", v.Line, k.Value)
		}
		*dst = v.Value
	}
	return nil
}

package spec

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// exprPosition maps a position inside the expression of field (1-based
// line, 0-based column in code points, as CEL reports them) to the file's
// line and column. ok is false when the field's position is unknown.
func (s *Spec) exprPosition(field string, line, col int) (fline, fcol int, ok bool) {
	n := s.pos[field]
	if n == nil || n.Kind != yaml.ScalarNode || n.Line < 1 || n.Line > len(s.lines) {
		return 0, 0, false
	}
	if line < 1 {
		line = 1
	}
	if col < 0 {
		col = 0
	}
	switch n.Style {
	case yaml.LiteralStyle:
		// Content lines follow the header line and are the value's lines,
		// less the block's indentation.
		indent := yamlBlockIndent(s.lines, n.Line)
		if indent < 0 {
			return n.Line, n.Column, true
		}
		return n.Line + line, indent + col + 1, true
	case yaml.FoldedStyle:
		indent := yamlBlockIndent(s.lines, n.Line)
		if indent < 0 {
			return n.Line, n.Column, true
		}
		return s.foldedPosition(n, indent, exprValueOffset(n.Value, line, col))
	}
	return s.flowPosition(n, exprValueOffset(n.Value, line, col))
}

// foldedPosition places the value rune off of a folded block scalar
// whose content is indented by indent.
func (s *Spec) foldedPosition(n *yaml.Node, indent, off int) (fline, fcol int, ok bool) {
	// Each source line contributes its text and one separator.
	for l := n.Line; l < len(s.lines); l++ {
		text := []rune(strings.TrimRight(s.lines[l], " \t\r"))
		if len(text) > indent {
			text = text[indent:]
		} else {
			text = nil
		}
		if off <= len(text) {
			return l + 1, indent + off + 1, true
		}
		off -= len(text) + 1
	}
	return n.Line, n.Column, true
}

// flowPosition places the value rune off of a flow scalar: plain,
// 'single' or "double" quoted.
func (s *Spec) flowPosition(n *yaml.Node, off int) (fline, fcol int, ok bool) {
	l := n.Line - 1
	src := []rune(s.lines[l])
	start := n.Column - 1 // 0-based, the first rune of the scalar
	quoted := n.Style == yaml.DoubleQuotedStyle || n.Style == yaml.SingleQuotedStyle
	if quoted {
		start++
	}
	if start > len(src) {
		return n.Line, n.Column, true
	}
	for {
		// Walk this line's runes, counting the value runes each makes.
		i := start
		for i < len(src) {
			if off == 0 {
				return l + 1, i + 1, true
			}
			r := src[i]
			if quoted && (r == '"' && n.Style == yaml.DoubleQuotedStyle || r == '\'' && n.Style == yaml.SingleQuotedStyle) {
				if n.Style == yaml.SingleQuotedStyle && i+1 < len(src) && src[i+1] == '\'' {
					i += 2
					off--
					continue
				}
				return l + 1, i + 1, true // closing quote
			}
			if n.Style == yaml.DoubleQuotedStyle && r == '\\' && i+1 < len(src) {
				switch src[i+1] {
				case 'x':
					i += 4
				case 'u':
					i += 6
				case 'U':
					i += 10
				default:
					i += 2
				}
				off--
				continue
			}
			i++
			off--
		}
		if off <= 0 {
			return l + 1, i + 1, true
		}
		// A line break folds into one value rune; the next line's leading
		// whitespace is not part of the value.
		off--
		l++
		if l >= len(s.lines) {
			return n.Line, n.Column, true
		}
		src = []rune(s.lines[l])
		start = 0
		for start < len(src) && (src[start] == ' ' || src[start] == '\t') {
			start++
		}
	}
}

// exprValueOffset converts a CEL (line, column) into a rune offset in v.
func exprValueOffset(v string, line, col int) int {
	off := 0
	for i, l := range strings.Split(v, "\n") {
		if i == line-1 {
			return off + min(col, len([]rune(l)))
		}
		off += len([]rune(l)) + 1
	}
	return off
}

// yamlBlockIndent returns the indentation (in runes) of the block scalar whose
// header is on line header (1-based): that of its first non-blank line.
func yamlBlockIndent(lines []string, header int) int {
	for l := header; l < len(lines); l++ {
		t := strings.TrimRight(lines[l], " \t\r")
		if t == "" {
			continue
		}
		return len([]rune(t)) - len([]rune(strings.TrimLeft(t, " ")))
	}
	return -1
}

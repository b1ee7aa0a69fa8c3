package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlUnknownField is yaml.v3's message for a key that KnownFields(true)
// refuses: it names the Go type, which means nothing to an operator.
var yamlUnknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)

// yamlBareDuration is yaml.v3's message for a number where a duration
// (time.Duration) is wanted, as in checkpoint_interval: 5.
var yamlBareDuration = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(?:int|float) `([^`]*)` into time.Duration$")

// bareDurationError says where a number was given for a duration (file,
// line, column and field, found again in the file) and what to write:
//
//	auditd.yaml:2:22: checkpoint_interval: 5 is a number, not a duration: use a duration such as 5s
func bareDurationError(path, line, value string) string {
	where, field := path+":"+line, ""
	if b, err := os.ReadFile(path); err == nil {
		var doc yaml.Node
		if yaml.Unmarshal(b, &doc) == nil {
			n, _ := strconv.Atoi(line)
			if f, col := findScalar(&doc, "", n, value); col > 0 {
				where, field = fmt.Sprintf("%s:%s:%d", path, line, col), f+": "
			}
		}
	}
	return fmt.Sprintf("%s: %s%s is a number, not a duration: use a duration such as %ss (units: ms, s, m, h)", where, field, value, value)
}

// findScalar finds the mapping value at line with the given value under n
// and returns its dotted YAML path and column.
func findScalar(n *yaml.Node, prefix string, line int, value string) (string, int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if f, col := findScalar(c, prefix, line, value); col > 0 {
				return f, col
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name := strings.TrimPrefix(prefix+"."+k.Value, ".")
			if v.Kind == yaml.ScalarNode && v.Line == line && v.Value == value {
				return name, v.Column
			}
			if f, col := findScalar(v, name, line, value); col > 0 {
				return f, col
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if f, col := findScalar(c, fmt.Sprintf("%s[%d]", prefix, i), line, value); col > 0 {
				return f, col
			}
		}
	}
	return "", 0
}

// friendlyConfigError rewrites the YAML errors of a config file so that
// they name the file, the line, the YAML field and the section it is in,
// with the closest known field ("did you mean"), instead of Go types:
//
//	auditd.yaml:3: unknown field "listn" at the top level (did you mean "listen"?)
//
// root is the struct the file decodes into.
func friendlyConfigError(path string, root any, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	fields := yamlFieldsByType(reflect.TypeOf(root))
	var msgs []string
	for _, e := range te.Errors {
		if d := yamlBareDuration.FindStringSubmatch(e); d != nil {
			msgs = append(msgs, bareDurationError(path, d[1], d[2]))
			continue
		}
		m := yamlUnknownField.FindStringSubmatch(e)
		if m == nil {
			msgs = append(msgs, path+":"+strings.TrimPrefix(e, "line "))
			continue
		}
		line, field, typ := m[1], m[2], m[3]
		known := fields[typ]
		where := "at the top level"
		if known.section != "" {
			where = "under " + known.section
		}
		msg := fmt.Sprintf("%s:%s: unknown field %q %s", path, line, field, where)
		if s := closest(field, known.names); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else if len(known.names) > 0 {
			msg += " (known fields: " + strings.Join(known.names, ", ") + ")"
		}
		msgs = append(msgs, msg)
	}
	return errors.New(strings.Join(msgs, "\n"))
}

type yamlStruct struct {
	section string // the YAML path of the first field of this type, e.g. "kafka.tls"
	names   []string
}

// yamlFieldsByType maps each struct type reachable from t (by its Go name,
// as yaml.v3 prints it) to its YAML field names.
func yamlFieldsByType(t reflect.Type) map[string]yamlStruct {
	out := map[string]yamlStruct{}
	var walk func(t reflect.Type, section string)
	walk = func(t reflect.Type, section string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		if _, seen := out[t.String()]; seen {
			return
		}
		st := yamlStruct{section: section}
		out[t.String()] = st
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if strings.Contains(opts, "inline") {
				walk(f.Type, section)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			st.names = append(st.names, name)
			walk(f.Type, strings.TrimPrefix(section+"."+name, "."))
		}
		out[t.String()] = st
	}
	walk(t, "")
	return out
}

// closest is the name within edit distance 2 of s (or with s as a prefix
// of it), "" if none.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(s, n)
		if strings.HasPrefix(n, s) && len(s) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

package spec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/rederive/store"
)

// yamlDecoder decodes YAML nodes into Go values, checking fields and types
// itself so that each error carries the position of its node.
type yamlDecoder struct {
	file   string
	deriv  string // name of the derivation being decoded, for errors
	errs   []*Error
	pos    map[string]*yaml.Node
	bad    map[string]bool
	nodes  int    // nodes visited and pairs merged, bounding alias and merge expansion
	tooBig *Error // set once nodes passes specMaxNodes: the walk stopped there
	depth  int    // nesting of decode, bounding recursion through aliases
	// merging holds the mappings whose merge keys are being expanded, so a
	// mapping that merges itself (directly or through others) is an error,
	// not an endless recursion.
	merging []*yaml.Node
	// expanded holds each mapping's pairs once its merges are expanded,
	// so that a mapping merged many times is expanded once.
	expanded map[*yaml.Node][]yamlPair
}

// specMaxErrors bounds the errors reported for one file: aliases can
// repeat an erroneous mapping many times. Past it, the decoder records no
// more (it records one more, so that Parse knows some were left out).
const specMaxErrors = 1000

// specMaxDepth bounds how deeply a spec's values nest (aliases included).
const specMaxDepth = 64

// specMaxNodes bounds the nodes a file may expand to through aliases and
// merge keys: the decoder's walk and every pair a merge brings in count.
const specMaxNodes = 1 << 20

// yamlAliasingMsg is how yaml's decoder refuses a document that aliases
// expand out of proportion to its size (its message; pinned by a test).
const yamlAliasingMsg = "document contains excessive aliasing"

// checkAliasing refuses a document whose aliases and merge keys expand it
// out of proportion to its size, by the check yaml's decoder makes while it
// decodes a value: the check that bounds the daemon's config file, which
// loadConfig decodes into its Config. Past 1,000 decoded nodes, at most 99%
// of them may come from aliases (a smaller share for documents of millions
// of nodes). The decoder's own walk below decodes nodes itself to keep
// their positions, so it is not covered by that check, and the check stops
// at a document's first fatal error (a "<<: 5" ahead of a bomb) without
// reaching the rest: the walk bounds expansion with specMaxNodes as well.
func checkAliasing(file string, root *yaml.Node) *Error {
	var v any
	err := root.Decode(&v)
	if err == nil || !strings.Contains(err.Error(), yamlAliasingMsg) {
		return nil // any other error is reported, placed, by the walk
	}
	return &Error{File: file, Msg: "aliases (*name) and merge keys (<<) expand the document out of proportion to its size (" +
		yamlAliasingMsg + ": past 1,000 decoded nodes at most 99% may come from aliases, as in the daemon's config file)"}
}

// charge counts k nodes visited at n and reports whether the walk is still
// within specMaxNodes; past it, the first caller reports the error and every
// later one stops at once.
func (d *yamlDecoder) charge(n *yaml.Node, field string, k int) bool {
	if d.nodes > specMaxNodes {
		return false
	}
	d.nodes += k
	if d.nodes > specMaxNodes {
		d.tooBig = &Error{File: d.file, Line: n.Line, Column: n.Column, Derivation: d.deriv, Field: field,
			Msg: fmt.Sprintf("the document expands to more than %d nodes through aliases (*name) and merge keys (<<)", specMaxNodes)}
		return false
	}
	return true
}

// errorf reports that field failed to decode.
func (d *yamlDecoder) errorf(n *yaml.Node, deriv, field, format string, args ...any) {
	if d.bad != nil && field != "" {
		d.bad[field] = true
	}
	d.add(n, deriv, field, format, args...)
}

// report reports an error about field that leaves its value usable.
func (d *yamlDecoder) report(n *yaml.Node, field, format string, args ...any) {
	d.add(n, d.deriv, field, format, args...)
}

// full reports whether no more errors are recorded.
func (d *yamlDecoder) full() bool { return len(d.errs) > specMaxErrors }

func (d *yamlDecoder) add(n *yaml.Node, deriv, field, format string, args ...any) {
	if d.full() {
		return
	}
	e := &Error{File: d.file, Derivation: deriv, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// resolve follows aliases.
func (d *yamlDecoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

type yamlPair struct{ key, val *yaml.Node }

// pairs returns a mapping's key/value pairs with merge keys ("<<")
// expanded; explicit keys come first and win over merged ones. Every pair,
// merged ones included, counts against specMaxNodes: merges chained through
// aliases expand exponentially.
func (d *yamlDecoder) pairs(n *yaml.Node) []yamlPair {
	if out, ok := d.expanded[n]; ok {
		if !d.charge(n, "", len(out)) {
			return nil
		}
		return out
	}
	if !d.charge(n, "", len(n.Content)/2) {
		return nil
	}
	if slices.Contains(d.merging, n) {
		d.errorf(n, d.deriv, "", "merge (<<) alias cycle: the mapping at line %d merges itself", n.Line)
		return nil
	}
	if len(d.merging) >= specMaxDepth {
		d.errorf(n, d.deriv, "", "merges (<<) nested more than %d deep", specMaxDepth)
		return nil
	}
	d.merging = append(d.merging, n)
	defer func() { d.merging = d.merging[:len(d.merging)-1] }()
	var out, merged []yamlPair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			v = d.resolve(v)
			var srcs []*yaml.Node
			switch v.Kind {
			case yaml.MappingNode:
				srcs = []*yaml.Node{v}
			case yaml.SequenceNode:
				for _, m := range v.Content {
					srcs = append(srcs, d.resolve(m))
				}
			default:
				srcs = []*yaml.Node{v}
			}
			for _, m := range srcs {
				if m.Kind != yaml.MappingNode {
					d.errorf(m, d.deriv, "", "merge (<<) wants a mapping or a list of mappings")
					continue
				}
				merged = append(merged, d.pairs(m)...)
			}
			continue
		}
		out = append(out, yamlPair{k, v})
	}
	if len(merged) > 0 {
		have := make(map[string]bool, len(out)+len(merged))
		for _, kv := range out {
			have[kv.key.Value] = true
		}
		for _, kv := range merged {
			if !have[kv.key.Value] {
				have[kv.key.Value] = true
				out = append(out, kv)
			}
		}
	}
	if d.expanded == nil {
		d.expanded = make(map[*yaml.Node][]yamlPair)
	}
	d.expanded[n] = out
	return out
}

// spec decodes one derivation.
func (d *yamlDecoder) spec(n *yaml.Node, lines []string) *Spec {
	n = d.resolve(n)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "", "", "want a derivation (a mapping), got %s", yamlNodeKind(n))
		return nil
	}
	s := &Spec{File: d.file, Line: n.Line, column: n.Column, lines: lines}
	for _, kv := range d.pairs(n) {
		if kv.key.Value == "name" {
			if v := d.resolve(kv.val); v.Kind == yaml.ScalarNode {
				d.deriv = v.Value
			}
		}
	}
	d.pos = make(map[string]*yaml.Node)
	d.bad = make(map[string]bool)
	d.decode(n, reflect.ValueOf(s).Elem(), "")
	s.pos, s.bad = d.pos, d.bad
	d.deriv = ""
	d.pos, d.bad = nil, nil
	s.applyDefaults()
	return s
}

var specDurationType = reflect.TypeFor[store.Duration]()

// decode sets v from n, reporting errors at field (a dotted path).
func (d *yamlDecoder) decode(n *yaml.Node, v reflect.Value, field string) {
	if !d.charge(n, field, 1) {
		return
	}
	n = d.resolve(n)
	if n == nil {
		return
	}
	if d.depth >= specMaxDepth {
		d.errorf(n, d.deriv, field, "values nested more than %d deep (an alias cycle?)", specMaxDepth)
		return
	}
	d.depth++
	defer func() { d.depth-- }()
	if field != "" {
		d.pos[field] = n
	}
	isNull := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	bad := func(want string) { d.wrongKind(n, field, want) }
	if v.Type() == specDurationType {
		if !isNull {
			d.decodeDuration(n, v, field)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if isNull {
			return // present but empty: checked as a struct with no fields
		}
		d.decode(n, v.Elem(), field)
	case reflect.Struct:
		if isNull {
			return
		}
		if n.Kind != yaml.MappingNode {
			bad("a mapping")
			return
		}
		d.decodeStruct(n, v, field)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			msg := "a string"
			if isExprField(field) {
				msg = "a CEL expression (a string; quote expressions that start with [ or {, e.g. '[event.from, event.to]')"
			}
			bad(msg)
			return
		}
		if isNull && (n.Value == "" || n.Value == "~") {
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Float64, reflect.Bool:
		if isNull {
			return
		}
		want := map[reflect.Kind]string{reflect.Int: "an integer", reflect.Float64: "a number", reflect.Bool: "true or false"}[v.Kind()]
		if n.Kind != yaml.ScalarNode {
			bad(want)
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.errorf(n, d.deriv, field, "want %s, got %q", want, n.Value)
		}
	case reflect.Slice:
		if !isNull {
			d.decodeSlice(n, v, field)
		}
	case reflect.Map:
		if !isNull {
			d.decodeMap(n, v, field)
		}
	default:
		d.errorf(n, d.deriv, field, "unsupported field type %s", v.Type())
	}
}

// wrongKind reports that n is not what field wants.
func (d *yamlDecoder) wrongKind(n *yaml.Node, field, want string) {
	d.errorf(n, d.deriv, field, "want %s, got %s", want, yamlNodeKind(n))
}

// decodeDuration decodes a duration such as "30s".
func (d *yamlDecoder) decodeDuration(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.ScalarNode {
		d.wrongKind(n, field, "a duration such as \"30s\"")
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errorf(n, d.deriv, field, "want a duration such as \"30s\": %v", err)
		return
	}
	v.SetInt(int64(dur))
}

// decodeSlice decodes a sequence, each element placed as field[i].
func (d *yamlDecoder) decodeSlice(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.SequenceNode {
		d.wrongKind(n, field, "a list")
		return
	}
	sl := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		d.decode(e, sl.Index(i), fmt.Sprintf("%s[%d]", field, i))
	}
	v.Set(sl)
}

// decodeMap decodes a mapping with string keys, each value placed as
// field.key; a key set twice is an error.
func (d *yamlDecoder) decodeMap(n *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.MappingNode {
		d.wrongKind(n, field, "a mapping")
		return
	}
	m := reflect.MakeMap(v.Type())
	seen := make(map[string]*yaml.Node)
	for _, kv := range d.pairs(n) {
		if kv.key.Kind != yaml.ScalarNode {
			d.errorf(kv.key, d.deriv, field, "want a string key, got %s", yamlNodeKind(kv.key))
			continue
		}
		k := kv.key.Value
		if first, dup := seen[k]; dup {
			d.errorf(kv.key, d.deriv, field, "key %q already set at line %d", k, first.Line)
			continue
		}
		seen[k] = kv.key
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(kv.val, ev, field+"."+k)
		m.SetMapIndex(reflect.ValueOf(k), ev)
	}
	v.Set(m)
}

// decodeStruct decodes a mapping into a struct by its yaml tags.
func (d *yamlDecoder) decodeStruct(n *yaml.Node, v reflect.Value, field string) {
	t := v.Type()
	byName := make(map[string]int, t.NumField())
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		byName[name] = i
		names = append(names, name)
	}
	seen := make(map[string]*yaml.Node)
	for _, kv := range d.pairs(n) {
		k := kv.key.Value
		path := k
		if field != "" {
			path = field + "." + k
		}
		i, ok := byName[k]
		if kv.key.Kind != yaml.ScalarNode || !ok {
			if d.full() {
				continue
			}
			msg := fmt.Sprintf("unknown field %q", k)
			if s := closestName(k, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.report(kv.key, field, "%s", msg)
			continue
		}
		if first, dup := seen[k]; dup {
			d.report(kv.key, path, "already set at line %d", first.Line)
			continue
		}
		seen[k] = kv.key
		d.decode(kv.val, v.Field(i), path)
	}
}

// isExprField reports whether a field holds a CEL expression.
func isExprField(field string) bool {
	switch field {
	case "filter", "key", "initial", "step", "all_keys", "step_all", "value":
		return true
	}
	return false
}

// closestName returns the name within edit distance 2 of s, if any.
func closestName(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := specEditDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func specEditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func yamlNodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

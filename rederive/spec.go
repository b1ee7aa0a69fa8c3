package rederive

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Spec is one derivation declared in YAML (see docs/derivations.md). A file
// holds a list of them under the top-level key "derivations".
//
// ParseSpecs fills in the defaults named below for fields absent from the
// YAML. A Spec built in Go gets no defaults: set every field you rely on.
type Spec struct {
	// Name identifies the derivation: [a-z0-9][a-z0-9_.-]*, at most 128
	// bytes, unique across all loaded files.
	Name string `yaml:"name"`
	// Sources are the log names or path.Match patterns ("payments.*") the
	// derivation folds. At least one.
	Sources []string `yaml:"sources"`
	// Decode is how the payload becomes the CEL variable event: "json"
	// (default) or "raw" (bytes).
	Decode string `yaml:"decode"`
	// Filter is an optional CEL expression over event and meta giving a
	// bool: false skips the event.
	Filter string `yaml:"filter"`
	// Key is a CEL expression over event and meta giving the key the event
	// updates (a string) or the keys (a list of strings; duplicates count
	// once). An empty list skips the event.
	Key string `yaml:"key"`
	// Initial is a CEL expression over key giving a key's state before its
	// first event ("0", "{}", "null").
	Initial string `yaml:"initial"`
	// Step is a CEL expression over state, event, key and meta giving the
	// key's new state.
	Step string `yaml:"step"`
	// Store is the derived store the result is compared with.
	Store StoreConfig `yaml:"store"`
	// Compare says how expected and actual values compare.
	Compare CompareConfig `yaml:"compare"`
	// Grace: a mismatch on a key whose newest contributing event is
	// younger than this is pending, not drift (default 60s).
	Grace Duration `yaml:"grace"`
	// ConfirmRuns: drift is confirmed only after it persists across this
	// many runs; 1 confirms at once (default 2).
	ConfirmRuns int `yaml:"confirm_runs"`
	// Lineage is how many ledger entries a drift report names per drifted
	// key, the last ones, listed oldest first (default 5; 0 names none).
	Lineage int `yaml:"lineage"`
	// ErrorBudget is how many derivation errors (events whose filter, key
	// or step failed) a run tolerates before it fails with ErrBudget
	// (default 100; 0 fails on the first).
	ErrorBudget int `yaml:"error_budget"`
	// Interval is how often the daemon runs an incremental check (default
	// 1m).
	Interval Duration `yaml:"interval"`
	// FullInterval is how often the daemon folds from zero instead of
	// resuming from saved state (default 1h). At least Interval.
	FullInterval Duration `yaml:"full_interval"`

	// File and Line say where the spec was declared (empty and 0 for a
	// Spec built in Go).
	File string `yaml:"-"`
	Line int    `yaml:"-"`

	column int                   // of the derivation's mapping
	pos    map[string]*yaml.Node // value node of each field present, by path
	bad    map[string]bool       // fields that failed to decode
	lines  []string              // the file's lines, to place CEL errors
}

// Defaults of fields absent from a YAML spec.
const (
	specDefaultGrace        = 60 * time.Second
	specDefaultConfirmRuns  = 2
	specDefaultLineage      = 5
	specDefaultErrorBudget  = 100
	specDefaultInterval     = time.Minute
	specDefaultFullInterval = time.Hour
)

// SpecError is an error in a derivation spec, placed at the file, line and
// column it concerns. For a CEL error the position is that of the offending
// token inside the expression, where the YAML allows placing it.
type SpecError struct {
	File       string
	Line       int // 1-based; 0 when unknown
	Column     int // 1-based; 0 when unknown
	Derivation string
	Field      string // e.g. "step", "store.postgres.dsn", "sources[1]"
	Msg        string
}

func (e *SpecError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Derivation != "" {
		fmt.Fprintf(&b, "derivation %q: ", e.Derivation)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// joinSpecErrors returns nil for no errors, else errors.Join of them.
func joinSpecErrors(errs []*SpecError) error {
	if len(errs) == 0 {
		return nil
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// LoadSpecs reads and parses derivation spec files. Names must be unique
// across all of them. Every error of every file is reported (errors.Join of
// *SpecError).
func LoadSpecs(paths ...string) ([]*Spec, error) {
	var specs []*Spec
	var errs []error
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, &SpecError{File: p, Msg: err.Error()})
			continue
		}
		ss, err := ParseSpecs(p, data)
		if err != nil {
			errs = append(errs, err)
		}
		specs = append(specs, ss...)
	}
	seen := make(map[string]*Spec)
	for _, s := range specs {
		if first, dup := seen[s.Name]; dup {
			if first.File != s.File { // within a file ParseSpecs reported it
				e := s.errAt("name", "duplicate name %q (first declared at %s:%d)", s.Name, first.File, first.Line)
				errs = append(errs, e)
			}
			continue
		}
		seen[s.Name] = s
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return specs, nil
}

// ParseSpecs parses one spec file: a YAML mapping whose only key is
// "derivations", a list of Spec. file names the file in errors. Unknown
// fields are errors; CEL expressions are compiled and type-checked. Every
// error of the file is reported (errors.Join of *SpecError).
func ParseSpecs(file string, data []byte) ([]*Spec, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, joinSpecErrors([]*SpecError{yamlSyntaxError(file, err)})
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	fail := func(n *yaml.Node, format string, args ...any) ([]*Spec, error) {
		e := &SpecError{File: file, Msg: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		return nil, joinSpecErrors([]*SpecError{e})
	}
	if top.Kind == 0 || top.Kind == yaml.DocumentNode {
		return fail(nil, `empty file: want a mapping with a "derivations" list`)
	}
	if top.Kind != yaml.MappingNode {
		return fail(top, `want a mapping with a "derivations" list, got %s`, yamlNodeKind(top))
	}
	d := &yamlDecoder{file: file}
	var list *yaml.Node
	for _, kv := range d.pairs(top) {
		if kv.key.Value != "derivations" {
			d.errorf(kv.key, "", "", "unknown field %q", kv.key.Value)
			continue
		}
		if list != nil {
			d.errorf(kv.key, "", "", `field "derivations" already set at line %d`, list.Line)
			continue
		}
		list = d.resolve(kv.val)
	}
	if list == nil && len(d.errs) == 0 {
		return fail(top, `missing "derivations" list`)
	}
	lines := strings.Split(string(data), "\n")
	var specs []*Spec
	if list != nil {
		switch {
		case list.Kind == yaml.ScalarNode && list.Tag == "!!null":
			// "derivations:" with nothing: no derivations.
		case list.Kind != yaml.SequenceNode:
			d.errorf(list, "", "derivations", "want a list, got %s", yamlNodeKind(list))
		default:
			for _, item := range list.Content {
				if s := d.spec(item, lines); s != nil {
					specs = append(specs, s)
				}
			}
		}
	}
	errs := d.errs
	seen := make(map[string]*Spec)
	for _, s := range specs {
		errs = append(errs, s.check()...)
		if _, cerrs := compileCEL(s); len(cerrs) > 0 {
			errs = append(errs, cerrs...)
		}
		if s.Name == "" {
			continue
		}
		if first, dup := seen[s.Name]; dup {
			errs = append(errs, s.errAt("name", "duplicate name %q (first declared at line %d)", s.Name, first.Line))
			continue
		}
		seen[s.Name] = s
	}
	if len(errs) > 0 {
		sortSpecErrors(errs)
		return nil, joinSpecErrors(errs)
	}
	return specs, nil
}

// Compile checks a spec and compiles its CEL expressions into a
// Derivation. Errors are *SpecError, joined.
func Compile(s *Spec) (Derivation, error) {
	errs := s.check()
	d, cerrs := compileCEL(s)
	errs = append(errs, cerrs...)
	if len(errs) > 0 {
		sortSpecErrors(errs)
		return nil, joinSpecErrors(errs)
	}
	return d, nil
}

func sortSpecErrors(errs []*SpecError) {
	slices.SortStableFunc(errs, func(a, b *SpecError) int {
		if a.File != b.File {
			return strings.Compare(a.File, b.File)
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntaxError places a YAML parser error.
func yamlSyntaxError(file string, err error) *SpecError {
	msg := err.Error()
	e := &SpecError{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &e.Line)
		e.Msg = m[2]
	}
	return e
}

// errAt returns an error about field, placed at the field's value, or at
// the derivation when the field is absent.
func (s *Spec) errAt(field, format string, args ...any) *SpecError {
	e := &SpecError{File: s.File, Line: s.Line, Column: s.column, Derivation: s.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	// Place it at the field, else at the nearest enclosing field present.
	for f := field; f != ""; {
		if n := s.pos[f]; n != nil {
			e.Line, e.Column = n.Line, n.Column
			break
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return e
}

var specNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// check validates everything but the CEL expressions.
func (s *Spec) check() []*SpecError {
	var errs []*SpecError
	add := func(field, format string, args ...any) {
		if !s.bad[field] {
			errs = append(errs, s.errAt(field, format, args...))
		}
	}
	switch {
	case s.Name == "":
		add("name", "missing name")
	case !specNameRE.MatchString(s.Name):
		add("name", "invalid name %q: want [a-z0-9][a-z0-9_.-]*", s.Name)
	case len(s.Name) > 128:
		add("name", "name longer than 128 bytes")
	}
	if len(s.Sources) == 0 {
		add("sources", "missing sources: want at least one log name or pattern")
	}
	for i, src := range s.Sources {
		f := fmt.Sprintf("sources[%d]", i)
		if _, ok := s.pos[f]; !ok {
			f = "sources"
		}
		if src == "" {
			add(f, "empty source")
		} else if _, err := path.Match(src, ""); err != nil {
			add(f, "bad pattern %q: %v", src, err)
		}
	}
	switch s.Decode {
	case "", "json", "raw":
	default:
		add("decode", `unknown decode %q: want "json" or "raw"`, s.Decode)
	}
	if strings.TrimSpace(s.Key) == "" {
		add("key", "missing key expression")
	}
	if strings.TrimSpace(s.Initial) == "" {
		add("initial", `missing initial expression (e.g. "0", "{}" or "null")`)
	}
	if strings.TrimSpace(s.Step) == "" {
		add("step", "missing step expression")
	}
	errs = append(errs, s.checkSettings()...)
	return errs
}

// checkSettings validates the store, comparison and scheduling settings.
func (s *Spec) checkSettings() []*SpecError {
	var errs []*SpecError
	add := func(field, format string, args ...any) {
		if !s.bad[field] {
			errs = append(errs, s.errAt(field, format, args...))
		}
	}
	st := &s.Store
	var kinds []string
	if st.Postgres != nil {
		kinds = append(kinds, "postgres")
	}
	if st.Redis != nil {
		kinds = append(kinds, "redis")
	}
	if st.File != nil {
		kinds = append(kinds, "file")
	}
	if st.HTTP != nil {
		kinds = append(kinds, "http")
	}
	switch len(kinds) {
	case 0:
		add("store", "missing store: set one of postgres, redis, file, http")
	case 1:
	default:
		add("store", "set only one of postgres, redis, file, http (got %s)", strings.Join(kinds, " and "))
	}
	if pg := st.Postgres; pg != nil {
		if pg.DSN == "" {
			add("store.postgres.dsn", "missing dsn")
		}
		switch {
		case pg.Query == "" && pg.Table == "":
			add("store.postgres", "set query or table")
		case pg.Query != "" && pg.Table != "":
			add("store.postgres.table", "set query or table, not both")
		}
	}
	if r := st.Redis; r != nil {
		if r.Pattern == "" {
			add("store.redis.pattern", "missing pattern (e.g. \"balance:*\")")
		}
		switch r.Type {
		case "", "hash", "json", "string":
		default:
			add("store.redis.type", `unknown type %q: want "hash", "json" or "string"`, r.Type)
		}
		if r.DB < 0 {
			add("store.redis.db", "db must be >= 0")
		}
	}
	if f := st.File; f != nil {
		if f.Path == "" {
			add("store.file.path", "missing path")
		}
		switch f.Format {
		case "", "jsonl", "csv":
		default:
			add("store.file.format", `unknown format %q: want "jsonl" or "csv"`, f.Format)
		}
	}
	if h := st.HTTP; h != nil {
		if h.URL == "" {
			add("store.http.url", "missing url")
		}
		switch h.Format {
		case "", "json", "ndjson":
		default:
			add("store.http.format", `unknown format %q: want "json" or "ndjson"`, h.Format)
		}
		if h.Timeout < 0 {
			add("store.http.timeout", "timeout must be >= 0")
		}
	}
	for _, k := range sortedMapKeys(s.Compare.Tolerance) {
		v := s.Compare.Tolerance[k]
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			f := "compare.tolerance." + k
			if _, ok := s.pos[f]; !ok {
				f = "compare.tolerance"
			}
			add(f, "tolerance %v for %q: want a finite number >= 0", v, k)
		}
	}
	for i, f := range s.Compare.Fields {
		if f == "" {
			add(fmt.Sprintf("compare.fields[%d]", i), "empty field name")
		}
	}
	if s.Grace < 0 {
		add("grace", "grace must be >= 0")
	}
	if s.ConfirmRuns < 1 {
		add("confirm_runs", "confirm_runs must be >= 1, got %d", s.ConfirmRuns)
	}
	if s.Lineage < 0 {
		add("lineage", "lineage must be >= 0, got %d", s.Lineage)
	}
	if s.ErrorBudget < 0 {
		add("error_budget", "error_budget must be >= 0, got %d", s.ErrorBudget)
	}
	if s.Interval <= 0 {
		add("interval", "interval must be > 0")
	}
	switch {
	case s.FullInterval <= 0:
		add("full_interval", "full_interval must be > 0")
	case s.Interval > 0 && s.FullInterval < s.Interval:
		add("full_interval", "full_interval (%s) must be >= interval (%s)", time.Duration(s.FullInterval), time.Duration(s.Interval))
	}
	return errs
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// yamlDecoder decodes YAML nodes into Go values, checking fields and types
// itself so that each error carries the position of its node.
type yamlDecoder struct {
	file  string
	deriv string // name of the derivation being decoded, for errors
	errs  []*SpecError
	pos   map[string]*yaml.Node
	bad   map[string]bool
	nodes int // nodes visited, bounding alias expansion
	depth int // nesting of decode, bounding recursion through aliases
	// merging holds the mappings whose merge keys are being expanded, so a
	// mapping that merges itself (directly or through others) is an error,
	// not an endless recursion.
	merging []*yaml.Node
}

// specMaxDepth bounds how deeply a spec's values nest (aliases included).
const specMaxDepth = 64

// specMaxNodes bounds the nodes a file may expand to through aliases.
const specMaxNodes = 1 << 20

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

func (d *yamlDecoder) add(n *yaml.Node, deriv, field, format string, args ...any) {
	e := &SpecError{File: d.file, Derivation: deriv, Field: field, Msg: fmt.Sprintf(format, args...)}
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
// expanded; explicit keys come first and win over merged ones.
func (d *yamlDecoder) pairs(n *yaml.Node) []yamlPair {
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
	for _, kv := range merged {
		if !slices.ContainsFunc(out, func(o yamlPair) bool { return o.key.Value == kv.key.Value }) {
			out = append(out, kv)
		}
	}
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

// applyDefaults fills in fields absent from the YAML.
func (s *Spec) applyDefaults() {
	present := func(f string) bool { _, ok := s.pos[f]; return ok }
	if s.Decode == "" {
		s.Decode = "json"
	}
	if !present("grace") {
		s.Grace = Duration(specDefaultGrace)
	}
	if !present("confirm_runs") {
		s.ConfirmRuns = specDefaultConfirmRuns
	}
	if !present("lineage") {
		s.Lineage = specDefaultLineage
	}
	if !present("error_budget") {
		s.ErrorBudget = specDefaultErrorBudget
	}
	if !present("interval") {
		s.Interval = Duration(specDefaultInterval)
	}
	if !present("full_interval") {
		s.FullInterval = Duration(specDefaultFullInterval)
	}
}

var specDurationType = reflect.TypeFor[Duration]()

// decode sets v from n, reporting errors at field (a dotted path).
func (d *yamlDecoder) decode(n *yaml.Node, v reflect.Value, field string) {
	d.nodes++
	if d.nodes > specMaxNodes {
		if d.nodes == specMaxNodes+1 {
			d.errorf(n, d.deriv, field, "document expands to too many nodes")
		}
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
	bad := func(want string) {
		d.errorf(n, d.deriv, field, "want %s, got %s", want, yamlNodeKind(n))
	}
	if v.Type() == specDurationType {
		if isNull {
			return
		}
		if n.Kind != yaml.ScalarNode {
			bad("a duration such as \"30s\"")
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.errorf(n, d.deriv, field, "want a duration such as \"30s\": %v", err)
			return
		}
		v.SetInt(int64(dur))
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
		if isNull {
			return
		}
		if n.Kind != yaml.SequenceNode {
			bad("a list")
			return
		}
		sl := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(e, sl.Index(i), fmt.Sprintf("%s[%d]", field, i))
		}
		v.Set(sl)
	case reflect.Map:
		if isNull {
			return
		}
		if n.Kind != yaml.MappingNode {
			bad("a mapping")
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
	default:
		d.errorf(n, d.deriv, field, "unsupported field type %s", v.Type())
	}
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
	case "filter", "key", "initial", "step":
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
		off := exprValueOffset(n.Value, line, col)
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
	// A flow scalar: plain, 'single' or "double" quoted.
	off := exprValueOffset(n.Value, line, col)
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

// Registry holds compiled derivations by name: those compiled from specs
// and those written in Go. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]registryEntry
}

type registryEntry struct {
	d    Derivation
	spec *Spec
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{entries: make(map[string]registryEntry)}
}

// Register adds a derivation under d.Name(). spec, if not nil, says how
// its result is checked: store, compare, grace, confirm_runs, lineage,
// error_budget, intervals; its Name must be empty or d.Name(), and its
// sources and expression fields are ignored (d says what it folds). A nil spec registers a derivation that
// is folded but not compared. A name already registryEntry is an error.
func (r *Registry) Register(d Derivation, spec *Spec) error {
	name := d.Name()
	if !specNameRE.MatchString(name) || len(name) > 128 {
		return fmt.Errorf("rederive: register: invalid name %q: want [a-z0-9][a-z0-9_.-]*", name)
	}
	if len(d.Sources()) == 0 {
		return fmt.Errorf("rederive: register %q: no sources", name)
	}
	for _, src := range d.Sources() {
		if _, err := path.Match(src, ""); err != nil || src == "" {
			return fmt.Errorf("rederive: register %q: bad source pattern %q", name, src)
		}
	}
	if spec != nil {
		if spec.Name != "" && spec.Name != name {
			return fmt.Errorf("rederive: register %q: spec is named %q", name, spec.Name)
		}
		if errs := spec.checkSettings(); len(errs) > 0 {
			return fmt.Errorf("rederive: register %q: %w", name, joinSpecErrors(errs))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, dup := r.entries[name]; dup {
		where := ""
		if prev.spec != nil && prev.spec.File != "" {
			where = fmt.Sprintf(" (declared at %s:%d)", prev.spec.File, prev.spec.Line)
		}
		return fmt.Errorf("rederive: register: duplicate derivation name %q%s", name, where)
	}
	r.entries[name] = registryEntry{d: d, spec: spec}
	return nil
}

// RegisterSpecs compiles specs and registers each with its spec. Every
// error is reported; the specs that compiled are registryEntry.
func (r *Registry) RegisterSpecs(specs ...*Spec) error {
	var errs []error
	for _, s := range specs {
		d, err := Compile(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.Register(d, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the derivation registryEntry under name and its spec (nil
// for a derivation registryEntry without one).
func (r *Registry) Lookup(name string) (Derivation, *Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	return e.d, e.spec, ok
}

// Names returns the registryEntry names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return sortedMapKeys(r.entries)
}

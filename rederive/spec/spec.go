// Package spec reads derivation specs: YAML files declaring derivations
// with CEL expressions (see docs/derivations.md). Parse and Load check
// every field, fill in the defaults and place each error at its file, line
// and column (inside a CEL expression where the YAML allows);
// Compile turns a Spec into a fold.Derivation; Fingerprint identifies its
// logic.
package spec

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/rederive/celfold"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/store"
)

// Spec is one derivation declared in YAML (see docs/derivations.md). A file
// holds a list of them under the top-level key "derivations".
//
// Parse fills in the defaults named below for fields absent from the
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
	// AllKeys is an optional CEL expression over event and meta giving a
	// bool: an event (past Filter) for which it is true applies to every
	// key holding a state at its place in the fold (a truncate, a reset),
	// through StepAll, instead of Key and Step.
	AllKeys string `yaml:"all_keys"`
	// StepAll is a CEL expression over state, event, key and meta giving
	// each key's new state for an AllKeys event. Set with AllKeys.
	StepAll string `yaml:"step_all"`
	// Value is an optional CEL expression over state and key giving the
	// value compared with the store instead of the state itself, so a state
	// can carry fields the store does not (a version, helper fields). It
	// is not part of the fold: changing it does not refold.
	Value string `yaml:"value"`
	// Commutative declares that the derivation's result does not depend on
	// the order of different logs' events for a key: its step commutes, or
	// no key takes events from two logs. It silences the load-time warning
	// of a derivation over several logs (Warnings).
	Commutative bool `yaml:"commutative"`
	// Severity is the "severity" label of the derivation's drift alerts:
	// "critical", "warning" (default) or "info". Empty in a Spec built in
	// Go: warning.
	Severity string `yaml:"severity"`
	// Store is the derived store the result is compared with.
	Store store.Config `yaml:"store"`
	// Compare says how expected and actual values compare.
	Compare compare.Config `yaml:"compare"`
	// Grace: a mismatch on a key whose newest contributing event is
	// younger than this is pending, not drift (default 60s).
	Grace store.Duration `yaml:"grace"`
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
	// CostLimit bounds the CEL cost of one evaluation of one expression
	// (a filter, a key, a step for one key; default 1,000,000): an event
	// whose evaluation costs more is a derivation error, counted against
	// ErrorBudget. 0 in a Spec built in Go: the default.
	CostLimit int `yaml:"cost_limit"`
	// Interval is how often the daemon runs an incremental check (default
	// 1m).
	Interval store.Duration `yaml:"interval"`
	// FullInterval is how often the daemon folds from zero instead of
	// resuming from saved state (default 1h). At least Interval.
	FullInterval store.Duration `yaml:"full_interval"`

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
	specDefaultCostLimit    = celfold.DefaultCostLimit
	specDefaultInterval     = time.Minute
	specDefaultFullInterval = time.Hour
)

// Error is an error in a derivation spec, placed at the file, line and
// column it concerns. For a CEL error the position is that of the offending
// token inside the expression, where the YAML allows placing it.
type Error struct {
	File       string
	Line       int // 1-based; 0 when unknown
	Column     int // 1-based; 0 when unknown
	Derivation string
	Field      string // e.g. "step", "store.postgres.dsn", "sources[1]"
	Msg        string
}

func (e *Error) Error() string {
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
func joinErrors(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// Load reads and parses derivation spec files. Names must be unique
// across all of them. Every error of every file is reported (errors.Join of
// *Error).
func Load(paths ...string) ([]*Spec, error) {
	specs, _, err := LoadCompiled(paths...)
	return specs, err
}

// LoadCompiled is Load that also returns each spec's derivation, compiled
// while the files were checked (Compile's, without compiling again):
// derivations[i] is specs[i]'s.
func LoadCompiled(paths ...string) (specs []*Spec, derivations []fold.Derivation, err error) {
	var errs []error
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, &Error{File: p, Msg: err.Error()})
			continue
		}
		ss, ds, err := parse(p, data)
		if err != nil {
			errs = append(errs, err)
		}
		specs = append(specs, ss...)
		derivations = append(derivations, ds...)
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
		return nil, nil, errors.Join(errs...)
	}
	return specs, derivations, nil
}

// Parse parses one spec file: a YAML mapping whose only key is
// "derivations", a list of Spec. file names the file in errors. Unknown
// fields are errors; CEL expressions are compiled and type-checked. Every
// error of the file is reported (errors.Join of *Error).
func Parse(file string, data []byte) ([]*Spec, error) {
	specs, _, err := parse(file, data)
	return specs, err
}

// parse is Parse that also returns each spec's compiled derivation.
func parse(file string, data []byte) ([]*Spec, []fold.Derivation, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, nil, joinErrors([]*Error{yamlSyntaxError(file, err)})
	}
	if e := checkAliasing(file, &root); e != nil {
		return nil, nil, joinErrors([]*Error{e})
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	fail := func(n *yaml.Node, format string, args ...any) ([]*Spec, []fold.Derivation, error) {
		e := &Error{File: file, Msg: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		return nil, nil, joinErrors([]*Error{e})
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
	if d.tooBig != nil {
		return nil, nil, joinErrors([]*Error{d.tooBig}) // the rest is cut short
	}
	errs := d.errs
	if n := celSourceBytes(specs); n > len(data)+specMaxAliasedCEL {
		// Aliases repeat expressions: each copy would be compiled.
		e := &Error{File: file, Msg: fmt.Sprintf("aliases (*name) and merge keys (<<) repeat the derivations' CEL expressions to %d bytes, "+
			"more than the file's %d bytes plus %d: write the expressions out", n, len(data), specMaxAliasedCEL)}
		return nil, nil, joinErrors(append(errs, e))
	}
	seen := make(map[string]*Spec)
	derivations := make([]fold.Derivation, 0, len(specs))
	for _, s := range specs {
		errs = append(errs, s.check()...)
		d, cerrs := compileCEL(s)
		errs = append(errs, cerrs...)
		derivations = append(derivations, d)
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
		if len(errs) > specMaxErrors {
			errs = append(errs[:specMaxErrors:specMaxErrors], &Error{File: file, Msg: fmt.Sprintf("more than %d errors; the rest are not shown", specMaxErrors)})
		}
		return nil, nil, joinErrors(errs)
	}
	return specs, derivations, nil
}

// specMaxAliasedCEL bounds how far aliases may grow the CEL source a file
// compiles beyond the file's own size.
const specMaxAliasedCEL = 64 << 10

// celSourceBytes is the length of every CEL expression of specs.
func celSourceBytes(specs []*Spec) int {
	n := 0
	for _, s := range specs {
		n += len(s.Filter) + len(s.Key) + len(s.Initial) + len(s.Step) + len(s.AllKeys) + len(s.StepAll) + len(s.Value)
	}
	return n
}

func sortSpecErrors(errs []*Error) {
	slices.SortStableFunc(errs, func(a, b *Error) int {
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
func yamlSyntaxError(file string, err error) *Error {
	msg := err.Error()
	e := &Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &e.Line)
		e.Msg = m[2]
	}
	return e
}

// errAt returns an error about field, placed at the field's value, or at
// the derivation when the field is absent.
func (s *Spec) errAt(field, format string, args ...any) *Error {
	e := &Error{File: s.File, Line: s.Line, Column: s.column, Derivation: s.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
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

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// check validates everything but the CEL expressions.
func (s *Spec) check() []*Error {
	var errs []*Error
	add := func(field, format string, args ...any) {
		if !s.bad[field] {
			errs = append(errs, s.errAt(field, format, args...))
		}
	}
	switch {
	case s.Name == "":
		add("name", "missing name")
	case !nameRE.MatchString(s.Name):
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
func (s *Spec) checkSettings() []*Error {
	var errs []*Error
	add := func(field, format string, args ...any) {
		if !s.bad[field] {
			errs = append(errs, s.errAt(field, format, args...))
		}
	}
	s.checkStore(add)
	if err := s.Compare.Check(); err != nil {
		add("compare.deleted", "%v", err)
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
	switch s.Severity {
	case "critical", "warning", "info":
	case "":
		if s.pos["severity"] != nil {
			add("severity", "severity must be critical, warning or info, got an empty value")
		}
	default:
		add("severity", "severity must be critical, warning or info, got %q", s.Severity)
	}
	if s.Lineage < 0 {
		add("lineage", "lineage must be >= 0, got %d", s.Lineage)
	}
	if s.CostLimit < 0 || s.CostLimit == 0 && s.pos["cost_limit"] != nil { // 0 in Go: the default
		add("cost_limit", "cost_limit must be at least 1, got %d", s.CostLimit)
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

// checkStore checks the store settings, reporting each error to add.
func (s *Spec) checkStore(add func(field, format string, args ...any)) {
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
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// applyDefaults fills in fields absent from the YAML.
func (s *Spec) applyDefaults() {
	present := func(f string) bool { _, ok := s.pos[f]; return ok }
	if s.Decode == "" {
		s.Decode = "json"
	}
	if !present("grace") {
		s.Grace = store.Duration(specDefaultGrace)
	}
	if !present("confirm_runs") {
		s.ConfirmRuns = specDefaultConfirmRuns
	}
	if !present("severity") {
		s.Severity = "warning"
	}
	if !present("lineage") {
		s.Lineage = specDefaultLineage
	}
	if !present("error_budget") {
		s.ErrorBudget = specDefaultErrorBudget
	}
	if !present("cost_limit") {
		s.CostLimit = specDefaultCostLimit
	}
	if !present("interval") {
		s.Interval = store.Duration(specDefaultInterval)
	}
	if !present("full_interval") {
		s.FullInterval = store.Duration(specDefaultFullInterval)
	}
}

// ValidName reports whether name is a valid derivation name:
// [a-z0-9][a-z0-9_.-]*, at most 128 bytes.
func ValidName(name string) bool { return nameRE.MatchString(name) && len(name) <= 128 }

// CheckSettings checks the settings that say how a derivation's result is
// checked (store, compare, grace, confirm_runs, lineage, error_budget,
// intervals), not its name, sources or expressions: what a spec given to
// a derivation written in Go must get right. Errors are *Error, joined.
func (s *Spec) CheckSettings() error { return joinErrors(s.checkSettings()) }

package rederive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// celDerivation is a Derivation compiled from a Spec.
type celDerivation struct {
	name    string
	sources []string
	raw     bool // decode: raw

	filter  cel.Program // nil: every event applies
	key     cel.Program
	initial cel.Program
	step    cel.Program

	initialConst ref.Val // initial's value when it does not use key
	usesMeta     bool    // filter, key or step reads meta
}

var _ Derivation = (*celDerivation)(nil)

func (d *celDerivation) Name() string      { return d.name }
func (d *celDerivation) Sources() []string { return slices.Clone(d.sources) }

// celEnvs are the CEL environments of each expression, for one decode mode.
type celEnvs struct {
	event   *cel.Env // filter and key: event, meta
	initial *cel.Env // key
	step    *cel.Env // state, event, key, meta
}

var (
	celEnvsJSON = sync.OnceValues(func() (*celEnvs, error) { return newCELEnvs(cel.DynType) })
	celEnvsRaw  = sync.OnceValues(func() (*celEnvs, error) { return newCELEnvs(cel.BytesType) })
)

// celLibrary is the CEL library derivations see: the standard library and
// the pure extensions. Nothing here reads a clock, randomness or I/O;
// timestamps without a time zone argument are read in UTC.
func celLibrary() []cel.EnvOption {
	return []cel.EnvOption{
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Math(),
		ext.Lists(),
		ext.Sets(),
		ext.Encoders(),
		ext.Bindings(),
		ext.TwoVarComprehensions(),
		ext.Regex(),
	}
}

func newCELEnvs(eventType *cel.Type) (*celEnvs, error) {
	base, err := cel.NewEnv(celLibrary()...)
	if err != nil {
		return nil, err
	}
	meta := cel.Variable("meta", cel.MapType(cel.StringType, cel.DynType))
	event := cel.Variable("event", eventType)
	key := cel.Variable("key", cel.StringType)
	state := cel.Variable("state", cel.DynType)
	var e celEnvs
	if e.event, err = base.Extend(event, meta); err != nil {
		return nil, err
	}
	if e.initial, err = base.Extend(key); err != nil {
		return nil, err
	}
	if e.step, err = base.Extend(state, event, key, meta); err != nil {
		return nil, err
	}
	return &e, nil
}

// compileCEL compiles a spec's expressions. Errors are placed in the
// spec's file where its positions are known. Absent expressions are left
// to Spec.check.
func compileCEL(s *Spec) (*celDerivation, []*SpecError) {
	raw := s.Decode == "raw"
	envs, err := celEnvsJSON()
	if raw {
		envs, err = celEnvsRaw()
	}
	if err != nil {
		return nil, []*SpecError{s.errAt("", "cel environment: %v", err)}
	}
	d := &celDerivation{name: s.Name, sources: slices.Clone(s.Sources), raw: raw}
	var errs []*SpecError
	compile := func(env *cel.Env, field, expr string) *cel.Ast {
		if strings.TrimSpace(expr) == "" {
			return nil
		}
		ast, iss := env.Compile(expr)
		if iss != nil && iss.Err() != nil {
			for _, e := range iss.Errors() {
				line, col := e.Location.Line(), e.Location.Column()
				se := s.errAt(field, "ERROR: <input>:%d:%d: %s", line, col+1, e.Message)
				if fl, fc, ok := s.exprPosition(field, line, col); ok {
					se.Line, se.Column = fl, fc
				}
				errs = append(errs, se)
			}
			return nil
		}
		return ast
	}
	program := func(env *cel.Env, field string, ast *cel.Ast) cel.Program {
		if ast == nil {
			return nil
		}
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			errs = append(errs, s.errAt(field, "%v", err))
			return nil
		}
		return prg
	}

	filter := compile(envs.event, "filter", s.Filter)
	if filter != nil {
		if t := filter.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
			errs = append(errs, s.errAt("filter", "filter must give a bool, got %s", t))
			filter = nil
		}
	}
	key := compile(envs.event, "key", s.Key)
	if key != nil && !celKeyType(key.OutputType()) {
		errs = append(errs, s.errAt("key", "key must give a string or a list of strings, got %s", key.OutputType()))
		key = nil
	}
	initial := compile(envs.initial, "initial", s.Initial)
	step := compile(envs.step, "step", s.Step)

	d.filter = program(envs.event, "filter", filter)
	d.key = program(envs.event, "key", key)
	d.initial = program(envs.initial, "initial", initial)
	d.step = program(envs.step, "step", step)
	d.usesMeta = celReferences(filter, "meta") || celReferences(key, "meta") || celReferences(step, "meta")

	if initial != nil && d.initial != nil && !celReferences(initial, "key") {
		v, err := d.eval(d.initial, &celActivation{})
		if err != nil {
			errs = append(errs, s.errAt("initial", "%v", err))
		}
		d.initialConst = v
	}
	if len(errs) > 0 || d.key == nil || d.initial == nil || d.step == nil {
		return nil, errs
	}
	return d, nil
}

// celKeyType reports whether t can be a key expression's type.
func celKeyType(t *cel.Type) bool {
	switch t.Kind() {
	case types.StringKind, types.DynKind:
		return true
	case types.ListKind:
		if p := t.Parameters(); len(p) == 1 {
			k := p[0].Kind()
			return k == types.StringKind || k == types.DynKind
		}
	}
	return false
}

// celReferences reports whether a checked expression reads the variable
// name.
func celReferences(ast *cel.Ast, name string) bool {
	if ast == nil {
		return false
	}
	for _, r := range ast.NativeRep().ReferenceMap() {
		if r.Name == name {
			return true
		}
	}
	return false
}

// celActivation supplies a derivation's variables to CEL without a map.
type celActivation struct {
	event, meta, state, key ref.Val
}

func (a *celActivation) ResolveName(name string) (any, bool) {
	var v ref.Val
	switch name {
	case "event":
		v = a.event
	case "state":
		v = a.state
	case "key":
		v = a.key
	case "meta":
		v = a.meta
	}
	return v, v != nil
}

func (a *celActivation) Parent() interpreter.Activation { return nil }

// eval runs a program, turning error values and panics into errors.
func (d *celDerivation) eval(prg cel.Program, act *celActivation) (out ref.Val, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	out, _, err = prg.Eval(act)
	if err != nil {
		return nil, err
	}
	if types.IsUnknown(out) {
		return nil, errors.New("unknown value")
	}
	return out, nil
}

// celEvent is the decoded form Prepare hands to Step.
type celEvent struct {
	celActivation         // event and meta set; state and key never
	keyOut        ref.Val // the key expression's value
}

// keyVal returns key as a CEL string, reusing the key expression's value
// when it holds key: one allocation fewer per step.
func (p *celEvent) keyVal(key string) ref.Val {
	switch k := p.keyOut.(type) {
	case types.String:
		if string(k) == key {
			return p.keyOut
		}
	case traits.Lister:
		if n, ok := k.Size().(types.Int); ok && n <= 8 {
			for i := range int(n) {
				v := k.Get(types.Int(i))
				if e, ok := v.(types.String); ok && string(e) == key {
					return v // not e: that would box it again
				}
			}
		}
	}
	return types.String(key)
}

// Prepare decodes the payload, runs the filter and the key expression.
func (d *celDerivation) Prepare(ev *Event) (keys []string, decoded any, err error) {
	defer func() {
		if r := recover(); r != nil {
			keys, decoded, err = nil, nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	p := &celEvent{}
	if d.raw {
		p.event = types.Bytes(slices.Clone(ev.Payload))
	} else {
		p.event, err = decodeEventJSON(ev.Payload)
		if err != nil {
			return nil, nil, fmt.Errorf("decode: %w", err)
		}
	}
	if d.usesMeta {
		p.meta = newCELMeta(ev)
	}
	if d.filter != nil {
		out, err := d.eval(d.filter, &p.celActivation)
		if err != nil {
			return nil, nil, fmt.Errorf("filter: %w", err)
		}
		b, ok := out.(types.Bool)
		if !ok {
			return nil, nil, fmt.Errorf("filter: got %s, want bool", out.Type().TypeName())
		}
		if !b {
			return nil, nil, nil
		}
	}
	out, err := d.eval(d.key, &p.celActivation)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	keys, err = celKeys(out)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	p.keyOut = out
	return keys, p, nil
}

// celKeys converts a key expression's value: a string or a list of
// strings, deduplicated in order.
func celKeys(v ref.Val) ([]string, error) {
	switch v := v.(type) {
	case types.String:
		return []string{string(v)}, nil
	case traits.Lister:
		n, ok := v.Size().(types.Int)
		if !ok {
			return nil, errors.New("list without a size")
		}
		keys := make([]string, 0, n)
		var seen map[string]struct{}
		for i := range int(n) {
			e := v.Get(types.Int(i))
			s, ok := e.(types.String)
			if !ok {
				return nil, fmt.Errorf("element %d is %s, want string", i, e.Type().TypeName())
			}
			if len(keys) < 8 {
				if slices.Contains(keys, string(s)) {
					continue
				}
			} else {
				if seen == nil {
					seen = make(map[string]struct{}, n)
					for _, k := range keys {
						seen[k] = struct{}{}
					}
				}
				if _, dup := seen[string(s)]; dup {
					continue
				}
				seen[string(s)] = struct{}{}
			}
			keys = append(keys, string(s))
		}
		return keys, nil
	}
	return nil, fmt.Errorf("got %s, want string or list(string)", v.Type().TypeName())
}

// Initial evaluates the initial expression for key.
func (d *celDerivation) Initial(key string) (State, error) {
	if d.initialConst != nil {
		return d.initialConst, nil
	}
	out, err := d.eval(d.initial, &celActivation{key: types.String(key)})
	if err != nil {
		return nil, fmt.Errorf("initial: %w", err)
	}
	return out, nil
}

// Step evaluates the step expression.
func (d *celDerivation) Step(state State, decoded any, ev *Event, key string) (State, error) {
	st, ok := state.(ref.Val)
	if !ok {
		return nil, fmt.Errorf("step: state is %T, want a CEL value", state)
	}
	p, ok := decoded.(*celEvent)
	if !ok {
		return nil, fmt.Errorf("step: decoded event is %T, want one from Prepare", decoded)
	}
	out, err := d.eval(d.step, &celActivation{event: p.event, meta: p.meta, state: st, key: p.keyVal(key)})
	if err != nil {
		return nil, fmt.Errorf("step: %w", err)
	}
	return out, nil
}

// Export renders a state as plain Go values: nil, bool, int64, uint64,
// float64, string, []byte, []any and map[string]any. Timestamps become
// RFC 3339 strings, durations strings such as "1.5s", optional values
// their value or nil. Map keys that are not strings are written in
// decimal (ints, uints) or as "true"/"false".
func (d *celDerivation) Export(state State) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("export: internal error: %v", r)
		}
	}()
	st, ok := state.(ref.Val)
	if !ok {
		return nil, fmt.Errorf("export: state is %T, want a CEL value", state)
	}
	return exportCELValue(st, 0)
}

const celMaxDepth = 10000

func exportCELValue(v ref.Val, depth int) (any, error) {
	if depth > celMaxDepth {
		return nil, errors.New("export: value nested too deeply")
	}
	switch v := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(v), nil
	case types.Int:
		return int64(v), nil
	case types.Uint:
		return uint64(v), nil
	case types.Double:
		return float64(v), nil
	case types.String:
		return string(v), nil
	case types.Bytes:
		return slices.Clone([]byte(v)), nil
	case types.Timestamp:
		return v.Time.Format(time.RFC3339Nano), nil
	case types.Duration:
		return string(v.ConvertToType(types.StringType).(types.String)), nil
	case *types.Optional:
		if !v.HasValue() {
			return nil, nil
		}
		return exportCELValue(v.GetValue(), depth+1)
	case traits.Mapper:
		out := make(map[string]any)
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			var ks string
			switch k := k.(type) {
			case types.String:
				ks = string(k)
			case types.Int:
				ks = strconv.FormatInt(int64(k), 10)
			case types.Uint:
				ks = strconv.FormatUint(uint64(k), 10)
			case types.Bool:
				ks = strconv.FormatBool(bool(k))
			default:
				return nil, fmt.Errorf("export: map key of type %s", k.Type().TypeName())
			}
			if _, dup := out[ks]; dup {
				return nil, fmt.Errorf("export: map keys of different types both read %q", ks)
			}
			val, _ := v.Find(k)
			e, err := exportCELValue(val, depth+1)
			if err != nil {
				return nil, err
			}
			out[ks] = e
		}
		return out, nil
	case traits.Lister:
		n, _ := v.Size().(types.Int)
		out := make([]any, 0, n)
		for it := v.Iterator(); it.HasNext() == types.True; {
			e, err := exportCELValue(it.Next(), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	return nil, fmt.Errorf("export: value of type %s", v.Type().TypeName())
}

// newCELMeta builds the meta variable of an event.
func newCELMeta(ev *Event) ref.Val {
	key := string(ev.Key)
	if !utf8.ValidString(key) {
		key = strings.ToValidUTF8(key, "\uFFFD")
	}
	// Fields in name order.
	f := make([]celField, 0, 9)
	f = append(f,
		celField{"has_key", types.Bool(ev.HasKey)},
		celField{"id", types.String(ev.ID)},
		celField{"index", types.Int(ev.Index)},
		celField{"key", types.String(key)},
		celField{"log", types.String(ev.Log)},
	)
	if ev.Source != nil {
		f = append(f,
			celField{"offset", types.Int(ev.Source.Offset)},
			celField{"partition", types.Int(ev.Source.Partition)},
		)
	}
	f = append(f, celField{"time", types.Timestamp{Time: ev.Time.UTC()}})
	if ev.Source != nil {
		f = append(f, celField{"topic", types.String(ev.Source.Topic)})
	}
	return &celObject{fields: f}
}

// celObject is a CEL map(string, dyn) whose fields are sorted by name and
// unique: meta, a map state restored by Decode, an event's object once
// iterated. Iterating it (and so every comprehension over it) visits its
// keys in sorted order.
type celObject struct {
	fields []celField
}

type celField struct {
	name string
	val  ref.Val
}

var (
	_ traits.Mapper = (*celObject)(nil)
	_ traits.Zeroer = (*celObject)(nil)
)

// sortedCELFields returns src's fields sorted by name, keeping the last of
// duplicate names.
func sortedCELFields(src []celField) []celField {
	idx := make([]int32, len(src))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return strings.Compare(src[a].name, src[b].name) })
	out := make([]celField, 0, len(src))
	for i, k := range idx {
		if i+1 < len(idx) && src[idx[i+1]].name == src[k].name {
			continue // a later duplicate wins
		}
		out = append(out, src[k])
	}
	return out
}

func (o *celObject) lookup(name string) (ref.Val, bool) {
	f := o.fields
	if len(f) <= 16 {
		for i := range f {
			if len(f[i].name) == len(name) && f[i].name == name {
				return f[i].val, true
			}
		}
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(f, name, func(f celField, name string) int { return strings.Compare(f.name, name) })
	if !ok {
		return nil, false
	}
	return f[i].val, true
}

// FindStringKey is the interpreter's fast path for field selection.
func (o *celObject) FindStringKey(name string) (any, bool) {
	return o.lookup(name)
}

func (o *celObject) Find(key ref.Val) (ref.Val, bool) {
	s, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key, false
		}
		return nil, false
	}
	return o.lookup(string(s))
}

func (o *celObject) Get(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

func (o *celObject) Contains(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

func (o *celObject) Size() ref.Val     { return types.Int(len(o.fields)) }
func (o *celObject) IsZeroValue() bool { return len(o.fields) == 0 }
func (o *celObject) Type() ref.Type    { return types.MapType }
func (o *celObject) Value() any        { return o }

func (o *celObject) refValMap() traits.Mapper {
	m := make(map[ref.Val]ref.Val, len(o.fields))
	for _, f := range o.fields {
		m[types.String(f.name)] = f.val
	}
	return types.NewRefValMap(types.DefaultTypeAdapter, m)
}

func (o *celObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.refValMap().ConvertToNative(t)
}

func (o *celObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

func (o *celObject) Equal(other ref.Val) ref.Val {
	m, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	fields := o.fields
	if m.Size() != types.Int(len(fields)) {
		return types.False
	}
	for _, f := range fields {
		ov, found := m.Find(types.String(f.name))
		if !found {
			return types.False
		}
		if types.Equal(f.val, ov) == types.False {
			return types.False
		}
	}
	return types.True
}

func (o *celObject) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o.fields {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %v", f.name, f.val)
	}
	b.WriteByte('}')
	return b.String()
}

func (o *celObject) Iterator() traits.Iterator { return &celObjectIterator{fields: o.fields} }

// celObjectIterator visits an object's keys in order.
type celObjectIterator struct {
	fields []celField
	i      int
}

func (it *celObjectIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.fields)) }

func (it *celObjectIterator) Next() ref.Val {
	if it.i >= len(it.fields) {
		return types.NewErr("iterator exhausted")
	}
	it.i++
	return types.String(it.fields[it.i-1].name)
}

func (it *celObjectIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("type conversion on iterators not supported")
}
func (it *celObjectIterator) ConvertToType(ref.Type) ref.Val {
	return types.NewErr("type conversion on iterators not supported")
}
func (it *celObjectIterator) Equal(ref.Val) ref.Val { return types.NoSuchOverloadErr() }
func (it *celObjectIterator) Type() ref.Type        { return types.IteratorType }
func (it *celObjectIterator) Value() any            { return nil }

// celJSONDecoder decodes JSON straight into CEL values. A number whose text is
// an integer (no fraction, no exponent) within int64 becomes an int; every
// other number a double. Objects become maps with string keys, arrays
// lists.
type celJSONDecoder struct {
	s       string
	i       int
	depth   int
	jfields []celJSONField // objects being indexed, innermost last
	elems   []ref.Val      // arrays under construction, innermost last
}

var celJSONDecoders = sync.Pool{New: func() any { return new(celJSONDecoder) }}

// decodeEventJSON decodes one JSON value. The result shares no memory with b.
func decodeEventJSON(b []byte) (ref.Val, error) {
	d := celJSONDecoders.Get().(*celJSONDecoder)
	d.s, d.i, d.depth = string(b), 0, 0
	v, err := d.value()
	if err == nil {
		d.skipSpace()
		if d.i < len(d.s) {
			v, err = nil, d.errorf("invalid character %q after top-level value", d.s[d.i])
		}
	}
	d.release()
	return v, err
}

// release returns d to the pool. Its scratch stacks keep references to
// the last event's values until overwritten; the pool drops idle decoders
// at garbage collection, and large stacks are not kept.
func (d *celJSONDecoder) release() {
	d.s = ""
	d.jfields, d.elems = d.jfields[:0], d.elems[:0]
	if cap(d.jfields) > 1024 || cap(d.elems) > 1024 {
		d.jfields, d.elems = nil, nil
	}
	celJSONDecoders.Put(d)
}

func (d *celJSONDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *celJSONDecoder) skipSpace() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *celJSONDecoder) value() (ref.Val, error) {
	d.skipSpace()
	if d.i >= len(d.s) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; c {
	case '{':
		return d.index()
	case '[':
		return d.array()
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return types.String(s), nil
	case 't':
		return d.literal("true", types.True)
	case 'f':
		return d.literal("false", types.False)
	case 'n':
		return d.literal("null", types.NullValue)
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return d.number()
		}
		return nil, d.errorf("invalid character %q looking for a value", c)
	}
}

func (d *celJSONDecoder) literal(lit string, v ref.Val) (ref.Val, error) {
	if !strings.HasPrefix(d.s[d.i:], lit) {
		return nil, d.errorf("invalid literal, want %s", lit)
	}
	d.i += len(lit)
	return v, nil
}

// celJSONObject is a JSON object of an event, decoded lazily: Prepare
// validates the whole payload and indexes the object's fields. A number,
// bool, null or plain string is decoded (boxed) each time an expression
// reads it, which costs no more than boxing it once up front for fields
// read once or twice, and nothing for fields never read. Other values
// (nested objects and arrays, strings with escapes) are decoded on first
// read, once, under a sync.Once: Steps of the same event may run at once.
// Iterating it visits its keys in sorted order, as for celObject.
type celJSONObject struct {
	src    string         // the whole payload
	fields []celJSONField // in document order; the last duplicate wins
}

// celJSONField locates one field's value in the payload.
type celJSONField struct {
	name       string
	start, end int   // the value's text, src[start:end]
	kind       uint8 // jsonNull ...
	bits       uint64
	once       *celJSONOnce // for jsonStringEsc, jsonObject, jsonArray
}

// celJSONOnce holds a value decoded on first read.
type celJSONOnce struct {
	once sync.Once
	v    ref.Val
}

// Kinds of JSON values, as indexed.
const (
	jsonNull      uint8 = iota
	jsonFalse           //
	jsonTrue            //
	jsonInt             // bits: the int64
	jsonDouble          // bits: the float64
	jsonString          // no escapes, valid UTF-8: the text between the quotes
	jsonStringEsc       // decoded on access
	jsonObject          // indexed on access
	jsonArray           // decoded on access
)

var (
	_ traits.Mapper = (*celJSONObject)(nil)
	_ traits.Zeroer = (*celJSONObject)(nil)
)

// allocCELJSONObject returns an empty object with room for n fields, in
// one allocation for up to 16.
func allocCELJSONObject(src string, n int) *celJSONObject {
	switch {
	case n <= 4:
		b := new(struct {
			o celJSONObject
			a [4]celJSONField
		})
		b.o.src, b.o.fields = src, b.a[:0:n]
		return &b.o
	case n <= 8:
		b := new(struct {
			o celJSONObject
			a [8]celJSONField
		})
		b.o.src, b.o.fields = src, b.a[:0:n]
		return &b.o
	case n <= 12:
		b := new(struct {
			o celJSONObject
			a [12]celJSONField
		})
		b.o.src, b.o.fields = src, b.a[:0:n]
		return &b.o
	case n <= 16:
		b := new(struct {
			o celJSONObject
			a [16]celJSONField
		})
		b.o.src, b.o.fields = src, b.a[:0:n]
		return &b.o
	}
	return &celJSONObject{src: src, fields: make([]celJSONField, 0, n)}
}

// value decodes a field's value.
func (o *celJSONObject) value(f *celJSONField) ref.Val {
	switch f.kind {
	case jsonString:
		return types.String(o.src[f.start+1 : f.end-1])
	case jsonInt:
		return types.Int(int64(f.bits))
	case jsonDouble:
		return types.Double(math.Float64frombits(f.bits))
	case jsonTrue:
		return types.True
	case jsonFalse:
		return types.False
	case jsonNull:
		return types.NullValue
	}
	f.once.once.Do(func() {
		d := celJSONDecoders.Get().(*celJSONDecoder)
		d.s, d.i, d.depth = o.src, f.start, 0
		v, err := d.value()
		d.release()
		if err != nil { // validated by Prepare: cannot happen
			v = types.WrapErr(err)
		}
		f.once.v = v
	})
	return f.once.v
}

func (o *celJSONObject) field(name string) *celJSONField {
	f := o.fields
	for i := len(f) - 1; i >= 0; i-- { // from the end: the last duplicate wins
		if len(f[i].name) == len(name) && f[i].name == name {
			return &f[i]
		}
	}
	return nil
}

// FindStringKey is the interpreter's fast path for field selection.
func (o *celJSONObject) FindStringKey(name string) (any, bool) {
	if f := o.field(name); f != nil {
		return o.value(f), true
	}
	return nil, false
}

func (o *celJSONObject) Find(key ref.Val) (ref.Val, bool) {
	s, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key, false
		}
		return nil, false
	}
	if f := o.field(string(s)); f != nil {
		return o.value(f), true
	}
	return nil, false
}

func (o *celJSONObject) Get(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

func (o *celJSONObject) Contains(key ref.Val) ref.Val {
	s, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key
		}
		return types.False
	}
	return types.Bool(o.field(string(s)) != nil)
}

// eager returns the object decoded: sorted, unique.
func (o *celJSONObject) eager() *celObject {
	fields := make([]celField, len(o.fields))
	for i := range o.fields {
		fields[i] = celField{o.fields[i].name, o.value(&o.fields[i])}
	}
	return &celObject{fields: sortedCELFields(fields)}
}

func (o *celJSONObject) Size() ref.Val {
	n := 0
	for i, f := range o.fields {
		if !slices.ContainsFunc(o.fields[i+1:], func(g celJSONField) bool { return g.name == f.name }) {
			n++
		}
	}
	return types.Int(n)
}

func (o *celJSONObject) IsZeroValue() bool { return len(o.fields) == 0 }
func (o *celJSONObject) Type() ref.Type    { return types.MapType }
func (o *celJSONObject) Value() any        { return o }
func (o *celJSONObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.eager().ConvertToNative(t)
}
func (o *celJSONObject) Equal(other ref.Val) ref.Val { return o.eager().Equal(other) }
func (o *celJSONObject) String() string              { return o.eager().String() }
func (o *celJSONObject) Iterator() traits.Iterator   { return o.eager().Iterator() }

func (o *celJSONObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

// index indexes the object at d.i (an opening brace), validating it.
func (d *celJSONDecoder) index() (ref.Val, error) {
	d.i++ // {
	if d.depth++; d.depth > celMaxDepth {
		return nil, d.errorf("nested too deeply")
	}
	start := len(d.jfields)
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		d.depth--
		return &celJSONObject{src: d.s}, nil
	}
	for {
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, d.errorf("want a string key")
		}
		name, err := d.str()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, d.errorf("want ':' after object key")
		}
		d.i++
		d.skipSpace()
		f := celJSONField{name: name, start: d.i}
		if f.kind, f.bits, err = d.skip(); err != nil {
			return nil, err
		}
		f.end = d.i
		switch f.kind {
		case jsonStringEsc, jsonObject, jsonArray:
			f.once = new(celJSONOnce)
		}
		d.jfields = append(d.jfields, f)
		d.skipSpace()
		if d.i >= len(d.s) {
			return nil, d.errorf("unexpected end of input in object")
		}
		if c := d.s[d.i]; c == ',' {
			d.i++
			continue
		} else if c != '}' {
			return nil, d.errorf("invalid character %q after object value", c)
		}
		d.i++
		break
	}
	o := allocCELJSONObject(d.s, len(d.jfields)-start)
	o.fields = append(o.fields, d.jfields[start:]...)
	d.jfields = d.jfields[:start]
	d.depth--
	return o, nil
}

// skip validates the value at d.i and moves past it. It returns the
// value's kind and, for a number, its bits.
func (d *celJSONDecoder) skip() (kind uint8, bits uint64, err error) {
	d.skipSpace()
	if d.i >= len(d.s) {
		return 0, 0, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; c {
	case '{', '[':
		if d.depth++; d.depth > celMaxDepth {
			return 0, 0, d.errorf("nested too deeply")
		}
		d.i++
		kind, end := jsonArray, byte(']')
		if c == '{' {
			kind, end = jsonObject, '}'
		}
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == end {
			d.i++
			d.depth--
			return kind, 0, nil
		}
		for {
			if kind == jsonObject {
				d.skipSpace()
				if d.i >= len(d.s) || d.s[d.i] != '"' {
					return 0, 0, d.errorf("want a string key")
				}
				if _, err := d.skipStr(); err != nil {
					return 0, 0, err
				}
				d.skipSpace()
				if d.i >= len(d.s) || d.s[d.i] != ':' {
					return 0, 0, d.errorf("want ':' after object key")
				}
				d.i++
			}
			if _, _, err := d.skip(); err != nil {
				return 0, 0, err
			}
			d.skipSpace()
			if d.i >= len(d.s) {
				return 0, 0, d.errorf("unexpected end of input in %s", map[bool]string{true: "object", false: "array"}[kind == jsonObject])
			}
			if c := d.s[d.i]; c == ',' {
				d.i++
				continue
			} else if c != end {
				if kind == jsonObject {
					return 0, 0, d.errorf("invalid character %q after object value", c)
				}
				return 0, 0, d.errorf("invalid character %q after array element", c)
			}
			d.i++
			d.depth--
			return kind, 0, nil
		}
	case '"':
		esc, err := d.skipStr()
		if esc {
			return jsonStringEsc, 0, err
		}
		return jsonString, 0, err
	case 't':
		_, err := d.literal("true", types.True)
		return jsonTrue, 0, err
	case 'f':
		_, err := d.literal("false", types.False)
		return jsonFalse, 0, err
	case 'n':
		_, err := d.literal("null", types.NullValue)
		return jsonNull, 0, err
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return d.numberBits()
		}
		return 0, 0, d.errorf("invalid character %q looking for a value", c)
	}
}

// skipStr validates the string at d.i and moves past it. esc reports
// whether it needs decoding (escapes or invalid UTF-8).
func (d *celJSONDecoder) skipStr() (esc bool, err error) {
	s := d.s
	start := d.i + 1
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return false, nil
		case c == '\\' || c < 0x20:
			_, err := d.strSlow(start)
			return true, err
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				_, err := d.strSlow(start)
				return true, err
			}
			i += size
		}
	}
	d.i = len(s)
	return false, d.errorf("unterminated string")
}

func (d *celJSONDecoder) array() (ref.Val, error) {
	d.i++ // [
	if d.depth++; d.depth > celMaxDepth {
		return nil, d.errorf("nested too deeply")
	}
	start := len(d.elems)
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		d.depth--
		return types.NewRefValList(types.DefaultTypeAdapter, []ref.Val{}), nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		d.skipSpace()
		if d.i >= len(d.s) {
			return nil, d.errorf("unexpected end of input in array")
		}
		if c := d.s[d.i]; c == ',' {
			d.i++
			continue
		} else if c != ']' {
			return nil, d.errorf("invalid character %q after array element", c)
		}
		d.i++
		break
	}
	elems := slices.Clone(d.elems[start:])
	d.elems = d.elems[:start]
	d.depth--
	return types.NewRefValList(types.DefaultTypeAdapter, elems), nil
}

func (d *celJSONDecoder) number() (ref.Val, error) {
	kind, bits, err := d.numberBits()
	if err != nil {
		return nil, err
	}
	if kind == jsonInt {
		return types.Int(int64(bits)), nil
	}
	return types.Double(math.Float64frombits(bits)), nil
}

// numberBits reads the number at d.i: an int (jsonInt) when its text is an
// integer within int64, else a double (jsonDouble).
func (d *celJSONDecoder) numberBits() (kind uint8, bits uint64, err error) {
	s, start, i := d.s, d.i, d.i
	if s[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - j
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		digits()
	default:
		d.i = i
		return 0, 0, d.errorf("invalid number")
	}
	isInt := true
	if i < len(s) && s[i] == '.' {
		i++
		isInt = false
		if digits() == 0 {
			d.i = i
			return 0, 0, d.errorf("invalid number: want a digit after '.'")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		isInt = false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			d.i = i
			return 0, 0, d.errorf("invalid number: want a digit in the exponent")
		}
	}
	d.i = i
	text := s[start:i]
	if isInt {
		if n := len(text); n <= 18 || n == 19 && text[0] == '-' {
			var v int64
			j := 0
			if text[0] == '-' {
				j = 1
			}
			for ; j < n; j++ {
				v = v*10 + int64(text[j]-'0')
			}
			if text[0] == '-' {
				v = -v
			}
			return jsonInt, uint64(v), nil
		}
		if v, err := strconv.ParseInt(text, 10, 64); err == nil {
			return jsonInt, uint64(v), nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, 0, d.errorf("number %s out of range", text)
	}
	return jsonDouble, math.Float64bits(f), nil
}

// str decodes a string at d.i (an opening quote). Without escapes or
// invalid UTF-8 it is a substring of the input, allocating nothing.
func (d *celJSONDecoder) str() (string, error) {
	s := d.s
	start := d.i + 1
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return s[start:i], nil
		case c == '\\' || c < 0x20:
			return d.strSlow(start)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return d.strSlow(start)
			}
			i += size
		}
	}
	d.i = len(s)
	return "", d.errorf("unterminated string")
}

func (d *celJSONDecoder) strSlow(start int) (string, error) {
	s := d.s
	b := make([]byte, 0, 2*(len(s)-start)/3+8)
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return string(b), nil
		case c < 0x20:
			d.i = i
			return "", d.errorf("invalid control character %#x in string", c)
		case c == '\\':
			if i+1 >= len(s) {
				d.i = i
				return "", d.errorf("unterminated string")
			}
			switch e := s[i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
				i += 2
			case 'b':
				b = append(b, '\b')
				i += 2
			case 'f':
				b = append(b, '\f')
				i += 2
			case 'n':
				b = append(b, '\n')
				i += 2
			case 'r':
				b = append(b, '\r')
				i += 2
			case 't':
				b = append(b, '\t')
				i += 2
			case 'u':
				r, ok := celHex4(s, i+2)
				if !ok {
					d.i = i
					return "", d.errorf("invalid \\u escape")
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2, ok = celHex4(s, i+2)
					}
					if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				d.i = i
				return "", d.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
	}
	d.i = len(s)
	return "", d.errorf("unterminated string")
}

func celHex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// State encoding: a version byte, then one tagged value:
//
//	'z' null   'F' false   'T' true
//	'i' int (zigzag varint)   'u' uint (uvarint)   'd' double (8 bytes, IEEE 754 big endian)
//	's' string, 'b' bytes: uvarint length, bytes
//	'l' list: uvarint count, values
//	'm' map: uvarint count, key value pairs in order of their encodings
//	't' timestamp: varint Unix seconds, uvarint nanoseconds, varint zone offset seconds
//	'D' duration: varint nanoseconds
//	'o' optional none   'O' optional of: value
const celStateV1 = 1

// Encode writes a state exactly, types included, deterministically: map
// entries are sorted.
func (d *celDerivation) Encode(state State) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("encode: internal error: %v", r)
		}
	}()
	st, ok := state.(ref.Val)
	if !ok {
		return nil, fmt.Errorf("encode: state is %T, want a CEL value", state)
	}
	return appendCELValue([]byte{celStateV1}, st, 0)
}

func appendCELValue(b []byte, v ref.Val, depth int) ([]byte, error) {
	if depth > celMaxDepth {
		return nil, errors.New("encode: value nested too deeply")
	}
	switch v := v.(type) {
	case types.Null:
		return append(b, 'z'), nil
	case types.Bool:
		if v {
			return append(b, 'T'), nil
		}
		return append(b, 'F'), nil
	case types.Int:
		return binary.AppendVarint(append(b, 'i'), int64(v)), nil
	case types.Uint:
		return binary.AppendUvarint(append(b, 'u'), uint64(v)), nil
	case types.Double:
		return binary.BigEndian.AppendUint64(append(b, 'd'), math.Float64bits(float64(v))), nil
	case types.String:
		b = binary.AppendUvarint(append(b, 's'), uint64(len(v)))
		return append(b, v...), nil
	case types.Bytes:
		b = binary.AppendUvarint(append(b, 'b'), uint64(len(v)))
		return append(b, v...), nil
	case types.Timestamp:
		_, offset := v.Time.Zone()
		b = binary.AppendVarint(append(b, 't'), v.Time.Unix())
		b = binary.AppendUvarint(b, uint64(v.Time.Nanosecond()))
		return binary.AppendVarint(b, int64(offset)), nil
	case types.Duration:
		return binary.AppendVarint(append(b, 'D'), int64(v.Duration)), nil
	case *types.Optional:
		if !v.HasValue() {
			return append(b, 'o'), nil
		}
		return appendCELValue(append(b, 'O'), v.GetValue(), depth+1)
	case *celJSONObject:
		return appendCELValue(b, v.eager(), depth)
	case *celObject:
		// As for any map, but without boxing each name.
		var enc []byte
		var spans []celEntrySpan
		var err error
		for _, f := range v.fields {
			k0 := len(enc)
			enc = binary.AppendUvarint(append(enc, 's'), uint64(len(f.name)))
			enc = append(enc, f.name...)
			k1 := len(enc)
			if enc, err = appendCELValue(enc, f.val, depth+1); err != nil {
				return nil, err
			}
			spans = append(spans, celEntrySpan{k0, k1, len(enc)})
		}
		return appendCELEntries(b, enc, spans), nil
	case traits.Mapper:
		var enc []byte
		var spans []celEntrySpan
		var err error
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			val, _ := v.Find(k)
			k0 := len(enc)
			if enc, err = appendCELValue(enc, k, depth+1); err != nil {
				return nil, err
			}
			k1 := len(enc)
			if enc, err = appendCELValue(enc, val, depth+1); err != nil {
				return nil, err
			}
			spans = append(spans, celEntrySpan{k0, k1, len(enc)})
		}
		return appendCELEntries(b, enc, spans), nil
	case traits.Lister:
		n, _ := v.Size().(types.Int)
		b = binary.AppendUvarint(append(b, 'l'), uint64(n))
		var err error
		count := 0
		for it := v.Iterator(); it.HasNext() == types.True; count++ {
			if b, err = appendCELValue(b, it.Next(), depth+1); err != nil {
				return nil, err
			}
		}
		if count != int(n) {
			return nil, fmt.Errorf("encode: list of size %d iterated %d elements", n, count)
		}
		return b, nil
	}
	return nil, fmt.Errorf("encode: state of type %s cannot be stored", v.Type().TypeName())
}

// celEntrySpan locates one encoded map entry: its key is enc[k0:k1], its
// value enc[k1:end].
type celEntrySpan struct{ k0, k1, end int }

// appendCELEntries appends a map of the entries in enc, in the order of
// their encoded keys.
func appendCELEntries(b, enc []byte, spans []celEntrySpan) []byte {
	slices.SortFunc(spans, func(x, y celEntrySpan) int { return bytes.Compare(enc[x.k0:x.k1], enc[y.k0:y.k1]) })
	b = binary.AppendUvarint(append(b, 'm'), uint64(len(spans)))
	for _, e := range spans {
		b = append(b, enc[e.k0:e.end]...)
	}
	return b
}

// Decode reads a state written by Encode.
func (d *celDerivation) Decode(b []byte) (s State, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("decode state: internal error: %v", r)
		}
	}()
	if len(b) == 0 || b[0] != celStateV1 {
		return nil, errors.New("decode state: unknown encoding version")
	}
	r := celStateReader{b: b[1:]}
	v, err := r.value(0)
	if err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("decode state: %d trailing bytes", len(r.b))
	}
	return v, nil
}

type celStateReader struct{ b []byte }

var errStateTruncated = errors.New("truncated")

func (r *celStateReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, errStateTruncated
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *celStateReader) varint() (int64, error) {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		return 0, errStateTruncated
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *celStateReader) bytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, errStateTruncated
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v, nil
}

func (r *celStateReader) value(depth int) (ref.Val, error) {
	if depth > celMaxDepth {
		return nil, errors.New("nested too deeply")
	}
	if len(r.b) == 0 {
		return nil, errStateTruncated
	}
	tag := r.b[0]
	r.b = r.b[1:]
	switch tag {
	case 'z':
		return types.NullValue, nil
	case 'F':
		return types.False, nil
	case 'T':
		return types.True, nil
	case 'i':
		v, err := r.varint()
		return types.Int(v), err
	case 'u':
		v, err := r.uvarint()
		return types.Uint(v), err
	case 'd':
		if len(r.b) < 8 {
			return nil, errStateTruncated
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(r.b))
		r.b = r.b[8:]
		return types.Double(v), nil
	case 's':
		v, err := r.bytes()
		return types.String(v), err
	case 'b':
		v, err := r.bytes()
		return types.Bytes(slices.Clone(v)), err
	case 't':
		sec, err := r.varint()
		if err != nil {
			return nil, err
		}
		nsec, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		off, err := r.varint()
		if err != nil {
			return nil, err
		}
		if nsec >= 1e9 || off < -86400 || off > 86400 {
			return nil, errors.New("bad timestamp")
		}
		t := time.Unix(sec, int64(nsec)).UTC()
		if off != 0 {
			t = t.In(time.FixedZone("", int(off)))
		}
		return types.Timestamp{Time: t}, nil
	case 'D':
		v, err := r.varint()
		return types.Duration{Duration: time.Duration(v)}, err
	case 'o':
		return types.OptionalNone, nil
	case 'O':
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		return types.OptionalOf(v), nil
	case 'l':
		n, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(r.b)) { // every element takes a byte at least
			return nil, errStateTruncated
		}
		elems := make([]ref.Val, n)
		for i := range elems {
			if elems[i], err = r.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return types.NewRefValList(types.DefaultTypeAdapter, elems), nil
	case 'm':
		n, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(r.b))/2 {
			return nil, errStateTruncated
		}
		keys := make([]ref.Val, n)
		vals := make([]ref.Val, n)
		allStrings := true
		for i := range keys {
			if keys[i], err = r.value(depth + 1); err != nil {
				return nil, err
			}
			if vals[i], err = r.value(depth + 1); err != nil {
				return nil, err
			}
			switch keys[i].(type) {
			case types.String:
			case types.Int, types.Uint, types.Bool:
				allStrings = false
			default:
				return nil, fmt.Errorf("map key of type %s", keys[i].Type().TypeName())
			}
		}
		if allStrings {
			fields := make([]celField, n)
			for i := range fields {
				fields[i] = celField{string(keys[i].(types.String)), vals[i]}
			}
			sorted := sortedCELFields(fields)
			if len(sorted) != len(fields) {
				return nil, errors.New("duplicate map key")
			}
			return &celObject{fields: sorted}, nil
		}
		m := make(map[ref.Val]ref.Val, n)
		for i, k := range keys {
			if _, dup := m[k]; dup {
				return nil, errors.New("duplicate map key")
			}
			m[k] = vals[i]
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, m), nil
	}
	return nil, fmt.Errorf("unknown tag %#x", tag)
}

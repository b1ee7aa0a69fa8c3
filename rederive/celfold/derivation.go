package celfold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"

	"github.com/auditd/auditd/internal/jsonscan"
	"github.com/auditd/auditd/rederive/fold"
)

var (
	_ fold.Derivation  = (*celDerivation)(nil)
	_ fold.KeyExporter = (*celDerivation)(nil)
)

var (
	celEnvsJSON = sync.OnceValues(func() (*celEnvs, error) { return newCELEnvs(cel.DynType) })
	celEnvsRaw  = sync.OnceValues(func() (*celEnvs, error) { return newCELEnvs(cel.BytesType) })
)

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

// eval runs a program, turning error values and panics into errors. A
// comprehension in progress stops when ctx ends (nil: never); every
// evaluation stops past the cost limit.
func (d *celDerivation) eval(ctx context.Context, prg *celProgram, act *celActivation) (out ref.Val, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	if prg.loops && ctx != nil && ctx.Done() != nil {
		out, _, err = prg.ContextEval(ctx, act)
	} else {
		out, _, err = prg.Eval(act)
	}
	if err != nil {
		var ce interpreter.EvalCancelledError
		if errors.As(err, &ce) && ce.Cause == interpreter.CostLimitExceeded {
			return nil, &CostLimitError{Limit: d.costLimit}
		}
		return nil, err
	}
	if types.IsUnknown(out) {
		return nil, errors.New("unknown value")
	}
	return out, nil
}

// CostLimitError is the error of an evaluation stopped by the cost limit.
type CostLimitError struct {
	Limit uint64
}

func (e *CostLimitError) Error() string {
	return fmt.Sprintf("evaluation stopped at the cost limit of %d (the derivation's cost_limit: raise it if the expression is meant to cost this much)", e.Limit)
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
func (d *celDerivation) Prepare(ev *fold.Event) (keys []string, decoded any, err error) {
	defer func() {
		if r := recover(); r != nil {
			keys, decoded, err = nil, nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	if d.plan != nil {
		if keys, decoded, err, ok := d.prepareFast(ev); ok {
			return keys, decoded, err
		}
	}
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
		if pass, err := d.filterCEL(ev.Context(), &p.celActivation); err != nil || !pass {
			return nil, nil, err
		}
	}
	if d.allKeys != nil {
		out, err := d.eval(ev.Context(), d.allKeys, &p.celActivation)
		if err != nil {
			return nil, nil, fmt.Errorf("all_keys: %w", err)
		}
		all, ok := out.(types.Bool)
		if !ok {
			return nil, nil, fmt.Errorf("all_keys: got %s, want bool", out.Type().TypeName())
		}
		if all {
			return nil, fold.AllKeys{Decoded: p}, nil
		}
	}
	keys, err = d.keyCEL(ev.Context(), p)
	if err != nil || len(keys) == 0 {
		return nil, nil, err
	}
	return keys, p, nil
}

// filterCEL runs the filter expression.
func (d *celDerivation) filterCEL(ctx context.Context, act *celActivation) (bool, error) {
	out, err := d.eval(ctx, d.filter, act)
	if err != nil {
		return false, fmt.Errorf("filter: %w", err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("filter: got %s, want bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// keyCEL runs the key expression, keeping its value in p.
func (d *celDerivation) keyCEL(ctx context.Context, p *celEvent) ([]string, error) {
	out, err := d.eval(ctx, d.key, &p.celActivation)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	keys, err := celKeys(out)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	p.keyOut = out
	return keys, nil
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
func (d *celDerivation) Initial(key string) (fold.State, error) {
	if d.initialConst != nil {
		return d.initialConst, nil
	}
	out, err := d.eval(nil, d.initial, &celActivation{key: types.String(key)})
	if err != nil {
		return nil, fmt.Errorf("initial: %w", err)
	}
	return out, nil
}

// Step evaluates the step expression.
func (d *celDerivation) Step(state fold.State, decoded any, ev *fold.Event, key string) (fold.State, error) {
	st, ok := state.(ref.Val)
	if !ok {
		return nil, fmt.Errorf("step: state is %T, want a CEL value", state)
	}
	if p, ok := decoded.(*fastEvent); ok {
		return d.stepFast(ev.Context(), st, p, key)
	}
	if ak, ok := decoded.(fold.AllKeys); ok {
		p, ok := ak.Decoded.(*celEvent)
		if !ok || d.stepAll == nil {
			return nil, fmt.Errorf("step_all: decoded event is %T, want one from Prepare", ak.Decoded)
		}
		out, err := d.eval(ev.Context(), d.stepAll, &celActivation{event: p.event, meta: p.meta, state: st, key: types.String(key)})
		if err != nil {
			return nil, fmt.Errorf("step_all: %w", err)
		}
		return out, nil
	}
	p, ok := decoded.(*celEvent)
	if !ok {
		return nil, fmt.Errorf("step: decoded event is %T, want one from Prepare", decoded)
	}
	out, err := d.eval(ev.Context(), d.step, &celActivation{event: p.event, meta: p.meta, state: st, key: p.keyVal(key)})
	if err != nil {
		return nil, errStep(err)
	}
	return out, nil
}

func errStep(err error) error { return fmt.Errorf("step: %w", err) }

// Export renders a state as plain Go values: nil, bool, int64, uint64,
// float64, string, json.Number, time.Time, []byte, []any and
// map[string]any. Decimals become a json.Number of their exact text
// ("1000.00"), timestamps a time.Time in UTC (an instant, which package
// compare compares as one; JSON encodes it in RFC 3339, fraction
// trimmed: "2026-01-01T09:30:00Z"), durations strings such as "1.5s",
// optional values their value or nil. Map keys that are not strings are
// written in decimal (ints, uints) or as "true"/"false".
//
// With a value expression, Export renders the value it gives for the
// state, which needs the key when the expression reads it: then only
// ExportKey (fold.Export) can render it, and Export fails.
func (d *celDerivation) Export(state fold.State) (v any, err error) {
	if d.value != nil && d.valueKey {
		return nil, errors.New("export: value reads key: export with fold.Export, which passes it")
	}
	return d.ExportKey("", state)
}

// ExportKey is Export for key's state: the value expression, if any,
// sees key.
func (d *celDerivation) ExportKey(key string, state fold.State) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("export: internal error: %v", r)
		}
	}()
	st, ok := state.(ref.Val)
	if !ok {
		return nil, fmt.Errorf("export: state is %T, want a CEL value", state)
	}
	if d.value != nil {
		if st, err = d.eval(nil, d.value, &celActivation{state: st, key: types.String(key)}); err != nil {
			return nil, fmt.Errorf("export: value: %w", err)
		}
	}
	return exportCELValue(st, 0)
}

// celMaxDepth bounds the nesting of values (exported, encoded, decoded
// states): JSON's limit, as events are JSON.
const celMaxDepth = jsonscan.MaxDepth

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
		return v.Time.UTC(), nil
	case *celDecimal:
		return json.Number(v.text()), nil
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
func newCELMeta(ev *fold.Event) ref.Val {
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

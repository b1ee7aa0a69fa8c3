package celfold

import (
	"context"
	"math"
	"strings"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/auditd/auditd/internal/jsonscan"
	"github.com/auditd/auditd/rederive/fold"
)

// The fast path of a derivation with a plan (plan.go). Prepare validates
// the whole payload as decodeEventJSON does, without allocating, but keeps
// only the fields the expressions read; the key, the filter and the step
// run natively when the plan recognised them and the values are of the
// types they expect, and in CEL over an object of those fields otherwise.
// Whatever it cannot handle the same way as the general path (a payload
// that is not a valid JSON object, a selected field that is an object or
// an array, an integer overflow) it leaves to the general path, which
// gives the result or the error it always gave.

// fastAbsent is the kind of a field the payload does not have.
const fastAbsent uint8 = 0xff

// fastVal is the value of one field of a plan.
type fastVal struct {
	str  string // jsonString, jsonStringEsc: the text, decoded, a copy
	bits uint64 // jsonInt, jsonDouble
	kind uint8  // jsonNull ... jsonStringEsc, or fastAbsent
}

func (v *fastVal) isString() bool { return v.kind == jsonString || v.kind == jsonStringEsc }

// val returns v as a CEL value.
func (v *fastVal) val() ref.Val {
	switch v.kind {
	case jsonString, jsonStringEsc:
		return types.String(v.str)
	case jsonInt:
		return types.Int(int64(v.bits))
	case jsonDouble:
		return types.Double(math.Float64frombits(v.bits))
	case jsonTrue:
		return types.True
	case jsonFalse:
		return types.False
	}
	return types.NullValue
}

// fastEvent is the decoded form the fast path hands to Step.
type fastEvent struct {
	keys [1]string
	vals []fastVal // by the plan's fields
	// cel is what the expressions the plan leaves to CEL need (its event:
	// the fields' object): nil when the plan runs them all natively.
	cel *celEvent
}

// allocFastEvent returns an event with room for n fields, in one
// allocation.
func allocFastEvent(n int) *fastEvent {
	if n <= 2 {
		b := new(struct {
			e fastEvent
			a [2]fastVal
		})
		b.e.vals = b.a[:n]
		return &b.e
	}
	b := new(struct {
		e fastEvent
		a [maxPlanFields]fastVal
	})
	b.e.vals = b.a[:n]
	return &b.e
}

// object returns the event's fields as a CEL object: every selection of
// one of them answers as on the whole payload.
func (p *fastEvent) object(fields []string) ref.Val {
	f := make([]celField, 0, len(fields))
	for i := range p.vals {
		if v := &p.vals[i]; v.kind != fastAbsent {
			f = append(f, celField{fields[i], v.val()})
		}
	}
	return &celObject{fields: f} // fields are sorted and unique
}

// prepareFast is Prepare with the plan. ok false: the general path must
// prepare the event instead.
func (d *celDerivation) prepareFast(ev *fold.Event) (keys []string, decoded any, err error, ok bool) {
	pl := d.plan
	p := allocFastEvent(len(pl.fields))
	if !projectJSON(ev.Payload, pl.fields, p.vals) {
		return nil, nil, nil, false
	}
	if d.usesMeta || pl.step == nil {
		p.celEvent(pl.fields).meta = newCELMetaIf(d.usesMeta, ev)
	}
	if d.filter != nil {
		c := pl.filter
		if c != nil && p.vals[c.field].isString() {
			if (p.vals[c.field].str == c.text) == c.not {
				return nil, nil, nil, true
			}
		} else if pass, err := d.filterCEL(ev.Context(), &p.celEvent(pl.fields).celActivation); err != nil || !pass {
			return nil, nil, err, true
		}
	}
	if pl.key >= 0 && p.vals[pl.key].isString() {
		p.keys[0] = p.vals[pl.key].str
		return p.keys[:], p, nil, true
	}
	keys, err = d.keyCEL(ev.Context(), p.celEvent(pl.fields))
	if err != nil || len(keys) == 0 {
		return nil, nil, err, true
	}
	return keys, p, nil, true
}

// celEvent returns p's CEL side, making it on first use: in Prepare only,
// before Steps share p.
func (p *fastEvent) celEvent(fields []string) *celEvent {
	if p.cel == nil {
		p.cel = &celEvent{}
		p.cel.event = p.object(fields)
	}
	return p.cel
}

func newCELMetaIf(uses bool, ev *fold.Event) ref.Val {
	if !uses {
		return nil
	}
	return newCELMeta(ev)
}

// stepFast is Step on an event the fast path prepared.
func (d *celDerivation) stepFast(ctx context.Context, st ref.Val, p *fastEvent, key string) (fold.State, error) {
	if a := d.plan.step; a != nil {
		if out, ok := a.apply(st, p.vals); ok {
			return out, nil
		}
	}
	c := p.cel
	if c == nil {
		// Not stored: Steps of the event's keys may run at once.
		c = &celEvent{celActivation: celActivation{event: p.object(d.plan.fields)}}
	}
	out, err := d.eval(ctx, d.step, &celActivation{event: c.event, meta: c.meta, state: st, key: c.keyVal(key)})
	if err != nil {
		return nil, errStep(err)
	}
	return out, nil
}

// apply runs the step natively when CEL would add (or subtract) two ints
// without overflow or two doubles: ok false for anything else, which CEL
// then evaluates (overflows, mixed types, strings, lists, errors).
func (a *planArith) apply(st ref.Val, vals []fastVal) (ref.Val, bool) {
	n := a.lit
	if a.field >= 0 {
		switch v := &vals[a.field]; v.kind {
		case jsonInt:
			n = planNum{isInt: true, i: int64(v.bits)}
		case jsonDouble:
			n = planNum{f: math.Float64frombits(v.bits)}
		default:
			return nil, false
		}
	}
	switch s := st.(type) {
	case types.Int:
		x, y := int64(s), n.i
		switch {
		case !n.isInt:
			return nil, false
		case a.sub:
			if y < 0 && x > math.MaxInt64+y || y > 0 && x < math.MinInt64+y {
				return nil, false
			}
			return types.Int(x - y), true
		default:
			if y > 0 && x > math.MaxInt64-y || y < 0 && x < math.MinInt64-y {
				return nil, false
			}
			return types.Int(x + y), true
		}
	case types.Double:
		if n.isInt {
			return nil, false
		}
		if a.sub {
			return s - types.Double(n.f), true
		}
		return s + types.Double(n.f), true
	}
	return nil, false
}

// projectJSON validates the JSON value b as decodeEventJSON does and, when
// it is an object, sets vals to its fields named by names (sorted; the
// last of duplicates wins). It reports false when b is not a valid object,
// or a named field is an object or an array.
func projectJSON(b []byte, names []string, vals []fastVal) bool {
	if len(b) == 0 || len(b) > math.MaxInt32 {
		return false
	}
	d := celJSONDecoders.Get().(*celJSONDecoder)
	// The scan reads b in place: nothing it keeps points into it.
	d.reset(unsafe.String(&b[0], len(b)), 0)
	ok := d.project(names, vals)
	d.release()
	return ok
}

func (d *celJSONDecoder) project(names []string, vals []fastVal) bool {
	var pos [maxPlanFields]int
	for i := range vals {
		vals[i] = fastVal{kind: fastAbsent}
	}
	d.i = jsonscan.SkipSpace(d.b, d.i)
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return false
	}
	j, empty, st := d.sc.Open(d.b, d.i)
	if st != jsonscan.OK {
		return false
	}
	d.i, d.depth = j, 1
	if !empty && !d.projectFields(names, vals, &pos) {
		return false
	}
	if _, st := jsonscan.End(d.b, d.i); st != jsonscan.OK {
		return false
	}
	for j := range vals {
		v := &vals[j]
		switch v.kind {
		case jsonString, jsonStringEsc:
			end, fl, _ := jsonscan.String(d.b, pos[j]) // validated above
			if v.str = d.str(pos[j], end, fl); v.kind == jsonString {
				v.str = strings.Clone(v.str) // else decoded: a new string
			}
		case jsonObject, jsonArray:
			return false
		}
	}
	return true
}

// projectFields scans an object's fields, d.i at its first key,
// recording the named ones' kinds, bits and positions. It steps from one
// member to the next with NextKey, as index does.
func (d *celJSONDecoder) projectFields(names []string, vals []fastVal, pos *[maxPlanFields]int) bool {
	key := d.i
	kEnd, v, fl, st := d.sc.Key(d.b, key)
	for {
		if st != jsonscan.OK {
			return false
		}
		name := d.str(key, kEnd, fl)
		d.i = v
		kind, bits, err := d.skip()
		if err != nil {
			return false
		}
		for k, n := range names {
			if len(n) == len(name) && n == name {
				vals[k] = fastVal{kind: kind, bits: bits}
				pos[k] = v
				break
			}
		}
		var more bool
		if key, kEnd, v, fl, more, st = d.sc.NextKey(d.b, d.i); !more && st == jsonscan.OK {
			d.i = kEnd
			return true
		}
	}
}

package celfold

import (
	"math"
	"reflect"
	"slices"
	"sync"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

var (
	_ traits.Mapper = (*celJSONObject)(nil)
	_ traits.Zeroer = (*celJSONObject)(nil)
)

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
		d.reset(o.src, f.start)
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

func (o *celJSONObject) Type() ref.Type { return types.MapType }

func (o *celJSONObject) Value() any { return o }

func (o *celJSONObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.eager().ConvertToNative(t)
}

func (o *celJSONObject) Equal(other ref.Val) ref.Val { return o.eager().Equal(other) }

func (o *celJSONObject) String() string { return o.eager().String() }

func (o *celJSONObject) Iterator() traits.Iterator { return o.eager().Iterator() }

func (o *celJSONObject) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

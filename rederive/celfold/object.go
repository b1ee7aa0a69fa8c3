package celfold

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

var (
	_ traits.Mapper = (*celObject)(nil)
	_ traits.Zeroer = (*celObject)(nil)
)

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

func (o *celObject) Size() ref.Val { return types.Int(len(o.fields)) }

func (o *celObject) IsZeroValue() bool { return len(o.fields) == 0 }

func (o *celObject) Type() ref.Type { return types.MapType }

func (o *celObject) Value() any { return o }

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

func (it *celObjectIterator) Type() ref.Type { return types.IteratorType }

func (it *celObjectIterator) Value() any { return nil }

package celfold

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/auditd/auditd/rederive/fold"
)

// State encoding: a version byte, then one tagged value:
//
//	'z' null   'F' false   'T' true
//	'i' int (zigzag varint)   'u' uint (uvarint)   'd' double (8 bytes, IEEE 754 big endian)
//	's' string, 'b' bytes: uvarint length, bytes
//	'l' list: uvarint count, values
//	'm' map: uvarint count, key value pairs in order of their encodings
//	't' timestamp: varint Unix seconds, uvarint nanoseconds, varint zone offset seconds
//	    (written 0: timestamps are held in UTC; another offset, from an older
//	    version, is read as the same instant in UTC)
//	'N' decimal: uvarint length, its text (apd's to-scientific-string, which
//	    keeps the exponent: "1000.00", "1E+3")
//	'D' duration: varint nanoseconds
//	'o' optional none   'O' optional of: value
const celStateV1 = 1

// Encode writes a state exactly, types included, deterministically: map
// entries are sorted.
func (d *celDerivation) Encode(state fold.State) (b []byte, err error) {
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
	case *celDecimal:
		t := v.d.String()
		b = binary.AppendUvarint(append(b, 'N'), uint64(len(t)))
		return append(b, t...), nil
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
func (d *celDerivation) Decode(b []byte) (s fold.State, err error) {
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
		return r.timestamp()
	case 'D':
		v, err := r.varint()
		return types.Duration{Duration: time.Duration(v)}, err
	case 'N':
		v, err := r.bytes()
		if err != nil {
			return nil, err
		}
		d, err := parseDecimal(string(v))
		if err != nil {
			return nil, err
		}
		return d, nil
	case 'o':
		return types.OptionalNone, nil
	case 'O':
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		return types.OptionalOf(v), nil
	case 'l':
		return r.list(depth)
	case 'm':
		return r.mapValue(depth)
	}
	return nil, fmt.Errorf("unknown tag %#x", tag)
}

// timestamp reads a timestamp's seconds, nanoseconds and zone offset.
func (r *celStateReader) timestamp() (ref.Val, error) {
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
	return types.Timestamp{Time: time.Unix(sec, int64(nsec)).UTC()}, nil
}

// list reads a list's length and elements.
func (r *celStateReader) list(depth int) (ref.Val, error) {
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
}

// mapValue reads a map's length and entries: a map with string keys
// only becomes an object, sorted by key.
func (r *celStateReader) mapValue(depth int) (ref.Val, error) {
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

package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/auditd/auditd/internal/envvar"
	"io"
	"math"
	"strconv"
)

// Open returns the Store c describes. It does no I/O: an unreachable
// store shows up in the first Check, Scan or Watermarks. Every error it
// returns wraps ErrStore.
//
// ${NAME} in a PostgreSQL DSN, a Redis address, username or password, and
// an HTTP URL or header value is replaced by the environment variable NAME
// (empty when unset). Only the braced form is expanded: any other $ is
// literal, so a password may hold one.
func Open(ctx context.Context, c Config) (Store, error) {
	n := 0
	for _, set := range []bool{c.Postgres != nil, c.Redis != nil, c.File != nil, c.HTTP != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: %d of postgres, redis, file and http are set, want exactly one", ErrStore, n)
	}
	switch {
	case c.Postgres != nil:
		return openPostgres(*c.Postgres)
	case c.Redis != nil:
		return openRedis(*c.Redis)
	case c.File != nil:
		return openFile(*c.File)
	default:
		return openHTTP(*c.HTTP)
	}
}

// storeError wraps err, met reading the store named store, in ErrStore. A
// done ctx wins: a cancelled or expired scan returns ctx.Err() as is.
func storeError(ctx context.Context, store string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrStore, store, err)
}

// objectValue turns a row read as an object (a PostgreSQL row, a JSONL,
// CSV or HTTP object, a Redis hash) into its value, by the rule documented
// on Row: the object without its key field, or the one remaining field's
// value when exactly one remains. It takes ownership of m.
func objectValue(m map[string]any, keyField string) any {
	delete(m, keyField)
	return fieldsValue(m)
}

// fieldsValue is the value of an object of value fields: the one field's
// value when there is exactly one, else the object.
func fieldsValue(m map[string]any) any {
	if len(m) == 1 {
		for _, v := range m {
			return v
		}
	}
	return m
}

// keyText renders a key field's value as a key: strings as they are,
// numbers in their exact text. ok is false for other values.
func keyText(v any) (key string, ok bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return string(v), true
	}
	return "", false
}

// IsJSONNumber reports whether s is a number in the JSON grammar
// (RFC 8259 section 6).
func IsJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i == len(s):
		return false
	case s[i] == '0':
		i++
	case '1' <= s[i] && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// FormatFloat renders f as encoding/json does (shortest text that reads
// back as f; exponent form below 1e-6 and from 1e21), as a json.Number,
// or as the string "NaN", "Infinity" or "-Infinity", which JSON cannot
// hold as numbers. bits is 32 for a float4, whose shortest text is that of
// the float32.
func FormatFloat(f float64, bits int) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, format, -1, bits)
	if format == 'e' {
		// e-07 to e-7, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return json.Number(b)
}

// DecodeJSON decodes one JSON value, numbers as json.Number, and rejects
// anything after it but white space.
func DecodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, errors.New("no JSON value")
		}
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// parseMarks reads watermarks from a JSON object {"log": size, ...}.
func parseMarks(b []byte) (map[string]uint64, error) {
	v, err := DecodeJSON(b)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("watermarks are not a JSON object")
	}
	marks := make(map[string]uint64, len(obj))
	for log, size := range obj {
		n, ok := size.(json.Number)
		if !ok {
			return nil, fmt.Errorf("watermark of %q is not a number", log)
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("watermark of %q: %s is not a tree size", log, n)
		}
		marks[log] = u
	}
	return marks, nil
}

// expandEnvSet applies the configuration's ${VAR} rule (envvar.ExpandSet)
// to s, the store's setting what: an unset variable is an error.
func expandEnvSet(what, s string) (string, error) {
	v, err := envvar.ExpandSet(s)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrStore, what, err)
	}
	return v, nil
}

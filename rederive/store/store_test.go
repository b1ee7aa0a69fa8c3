package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestStoreExpandEnv(t *testing.T) {
	// expandEnvSet (the stores' rule) refuses an unset variable, and takes
	// one set, even to "", as given.
	t.Setenv("AUDITD_TEST_EMPTY", "")
	if got, err := expandEnvSet("x", "a${AUDITD_TEST_EMPTY}b"); err != nil || got != "ab" {
		t.Errorf("a variable set to empty: %q, %v", got, err)
	}
	if _, err := expandEnvSet("x", "${AUDITD_TEST_UNSET}"); err == nil {
		t.Errorf("an unset variable expanded")
	}
}

func TestStoreFormatFloat(t *testing.T) {
	for _, f := range []float64{0, 1, -2.5, 0.1, 1.0 / 3, 1e20, 1e21, 1e-6, 1e-7, 123456789, 5e-324, 1.7976931348623157e308} {
		b, _ := json.Marshal(f)
		if got := FormatFloat(f, 64); got != json.Number(b) {
			t.Errorf("formatFloat(%v) = %v, want %s as encoding/json", f, got, b)
		}
	}
	if got := FormatFloat(float64(float32(0.1)), 32); got != json.Number("0.1") {
		t.Errorf("formatFloat(float32 0.1) = %v, want 0.1", got)
	}
}

// FuzzStoreDecode feeds arbitrary bytes to the file and HTTP decoders:
// they return rows or an ErrStore error, never panic, and every row has
// a value of the JSON-like kinds.
func FuzzStoreDecode(f *testing.F) {
	for _, s := range []string{
		"{\"key\": \"a\", \"v\": 12.50}\n{\"key\": 7, \"v\": null, \"w\": [1]}\n",
		"[{\"key\": \"a\", \"v\": 1}, {\"key\": \"b\"}]",
		"key,v,w\na,12.50,x\nb,007,\n",
		"\uFEFFkey,v\n\"a,b\",\"1\"\"\"\n",
		"{\"payments.0\": 12, \"x\": 0}",
		"", "[", "{", "key\n", "[1]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		check := func(what string, err error, rows []Row) {
			if err != nil && !errors.Is(err, ErrStore) {
				t.Fatalf("%s: error %v does not wrap ErrStore", what, err)
			}
			for _, r := range rows {
				if !storeJSONLike(r.Value) {
					t.Fatalf("%s: key %q: value %#v is not JSON-like", what, r.Key, r.Value)
				}
			}
		}
		var rows []Row
		collect := func(r Row) error { rows = append(rows, r); return nil }
		err := scanJSONL(ctx, bytes.NewReader(b), "fuzz", "key", collect)
		check("jsonl", err, rows)
		rows = nil
		err = scanJSONArray(ctx, bytes.NewReader(b), "fuzz", "key", collect)
		check("json array", err, rows)
		rows = nil
		err = scanCSV(ctx, bytes.NewReader(b), "fuzz", "key", collect)
		check("csv", err, rows)
		parseMarks(b) // no panic
		s := string(b)
		if IsJSONNumber(s) != (json.Valid(b) && len(s) > 0 && (s[0] == '-' || '0' <= s[0] && s[0] <= '9') && strings.TrimSpace(s) == s) {
			t.Fatalf("isJSONNumber(%q) = %v, encoding/json disagrees", s, IsJSONNumber(s))
		}
	})
}

// storeJSONLike reports whether v holds only the kinds Row documents.
func storeJSONLike(v any) bool {
	switch v := v.(type) {
	case nil, bool, string, Text:
		return true
	case json.Number:
		return IsJSONNumber(string(v))
	case []any:
		for _, e := range v {
			if !storeJSONLike(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if !storeJSONLike(e) {
				return false
			}
		}
		return true
	}
	return false
}

package ingest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/auditd/auditd/ingest"
)

// Item 1: ids and keys that encoding/json would rewrite to U+FFFD (invalid
// UTF-8 bytes, lone surrogate escapes) are refused with their line, in
// both body forms; an id given as "" is refused, not taken as absent.
func TestDecodeRefusesRewrittenStrings(t *testing.T) {
	bad := []struct{ name, event, want string }{
		{"id with invalid bytes", `{"id":"bad` + "\xff\xfe" + `id","payload":1}`, "id: not valid UTF-8"},
		{"id with an overlong encoding", `{"id":"bad` + "\xc0\xaf" + `id","payload":1}`, "id: not valid UTF-8"},
		{"id with a lone high surrogate", `{"id":"a\ud800","payload":1}`, "lone UTF-16 surrogate"},
		{"id with a lone low surrogate", `{"id":"a\uDFFFb","payload":1}`, "lone UTF-16 surrogate"},
		{"id with a lone surrogate beside a real U+FFFD", `{"id":"\ufffd\ud800","payload":1}`, "lone UTF-16 surrogate"},
		{"key with invalid bytes", `{"id":"k","key":"` + "\xff" + `","payload":1}`, "key: not valid UTF-8"},
		{"key with a lone surrogate", `{"id":"k","key":"\udc00","payload":1}`, "lone UTF-16 surrogate"},
		{"empty id", `{"id":"","payload":1}`, `id is ""`},
	}
	for _, tc := range bad {
		for _, form := range []string{"ndjson", "array"} {
			body, line := `{"id":"ok","payload":1}`+"\n"+tc.event+"\n", 2
			if form == "array" {
				body, line = "[\n"+`{"id":"ok","payload":1}`+",\n"+tc.event+"\n]", 3
			}
			_, err := ingest.Decode(strings.NewReader(body), ingest.Limits{})
			var de *ingest.DecodeError
			if !errors.As(err, &de) {
				t.Errorf("%s (%s): got %v, want a DecodeError", tc.name, form, err)
				continue
			}
			if de.Line != line || de.Item != 1 || !strings.Contains(de.Err, tc.want) {
				t.Errorf("%s (%s): got %q (line %d item %d), want line %d item 1 mentioning %q", tc.name, form, de.Err, de.Line, de.Item, line, tc.want)
			}
		}
	}
	// What encoding/json keeps as written still decodes, byte for byte.
	good := []struct{ event, id string }{
		{`{"id":"\ufffd","payload":1}`, "\uFFFD"},
		{`{"id":"` + "\uFFFD" + `x","payload":1}`, "\uFFFDx"},
		{`{"id":"\ud83d\ude00","payload":1}`, "\U0001F600"},
		{`{"id":"a\\ud800","payload":1}`, `a\ud800`},
		{`{"id":"caf\u00e9","payload":1}`, "café"},
	}
	for _, tc := range good {
		es, err := ingest.Decode(strings.NewReader(tc.event), ingest.Limits{})
		if err != nil || len(es) != 1 || es[0].ID != tc.id {
			t.Errorf("%s: got %v, %v; want id %q", tc.event, es, err, tc.id)
		}
	}
}

// Item 6: decoding keeps no copy of the whole body: the bytes allocated to
// decode a body stay under 1.6 times its size (the entries themselves take
// one; it was 8 times), whatever its form.
func TestDecodeMemory(t *testing.T) {
	payload := `"` + strings.Repeat("p", 64<<10) + `"`
	var nd, arr strings.Builder
	arr.WriteString("[")
	for i := range 256 {
		fmt.Fprintf(&nd, `{"id":"e-%d","payload":%s}`+"\n", i, payload)
		if i > 0 {
			arr.WriteString(",\n")
		}
		fmt.Fprintf(&arr, `{"id":"e-%d","payload":%s}`, i, payload)
	}
	arr.WriteString("]")
	for form, body := range map[string]string{"ndjson": nd.String(), "array": arr.String()} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		es, err := ingest.Decode(strings.NewReader(body), ingest.Limits{})
		runtime.ReadMemStats(&after)
		if err != nil || len(es) != 256 {
			t.Fatalf("%s: %d entries, %v", form, len(es), err)
		}
		ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body))
		t.Logf("%s: %.2f bytes allocated per body byte", form, ratio)
		if ratio > 1.6 {
			t.Errorf("%s: decoding allocated %.2f times the body (%d bytes)", form, ratio, len(body))
		}
	}
}

package ingest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/merkle"
)

// FuzzDecode checks that Decode never panics, that it fails only with
// ErrEmpty or a *DecodeError naming a line of the body, and that what it
// accepts is valid: every entry has a payload, JSON payloads are valid and
// compact, and the limits hold.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"",
		"\n\n",
		"[]",
		`{"payload":1}`,
		`{"id":"a","key":"k","time":"2024-05-01T10:00:00Z","payload":{"a": [1, 2]}}` + "\n" + `{"payload_base64":"AAE="}`,
		`[{"id":"a","payload":"x"},{"key_base64":"/w==","payload":null}]`,
		"[\n{\"id\":\"a\",\"payload\":1},\n{\"id\":5,\"payload\":1}\n]",
		"{\"payload\":1}\r\n\r\n{\"payload\":}\r\n",
		`{"payload":1,"payload_base64":"AA=="}`,
		`{"payload":1,"extra":2}`,
		`{"time":"1500-01-01T00:00:00Z","payload":1}`,
		`[{"payload":1}] x`,
		`{"payload":1} {"payload":2}`,
		`{"payload":"` + strings.Repeat("x", 1000) + `"}`, // lines past the 64 KiB buffer: TestDecodeLongLines
		"\xef\xbb\xbf{\"payload\":1}",
		`[{"payload":1},`,
		`{"payload":"\u2028<&>"}`,
	} {
		f.Add([]byte(s))
	}
	const maxEvents, maxPayload = 50, 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ingest.Decode(bytes.NewReader(data), ingest.Limits{MaxEvents: maxEvents, MaxPayload: maxPayload})
		if err != nil {
			if es != nil {
				t.Fatalf("entries returned with error %v", err)
			}
			var de *ingest.DecodeError
			switch {
			case errors.Is(err, ingest.ErrEmpty):
			case errors.As(err, &de):
				if lines := bytes.Count(data, []byte{'\n'}) + 1; de.Line < 1 || de.Line > lines {
					t.Fatalf("error at line %d of a %d-line body: %v", de.Line, lines, err)
				}
				if de.Item < -1 || de.Item > maxEvents {
					t.Fatalf("error at item %d: %v", de.Item, err)
				}
				if de.Err == "" {
					t.Fatalf("error without a message: %#v", de)
				}
			default:
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if len(es) == 0 || len(es) > maxEvents {
			t.Fatalf("%d entries without an error", len(es))
		}
		for i, e := range es {
			if e.Payload == nil {
				t.Fatalf("entry %d has no payload", i)
			}
			if len(e.Payload) > maxPayload {
				t.Fatalf("entry %d: payload of %d bytes", i, len(e.Payload))
			}
			if e.PayloadJSON {
				if !json.Valid(e.Payload) {
					t.Fatalf("entry %d: payload %q is not valid JSON", i, e.Payload)
				}
				var c bytes.Buffer
				if err := json.Compact(&c, e.Payload); err != nil || !bytes.Equal(c.Bytes(), e.Payload) {
					t.Fatalf("entry %d: payload %q is not compact", i, e.Payload)
				}
			}
			if len(e.ID) > merkle.MaxID || !utf8.ValidString(e.ID) {
				t.Fatalf("entry %d: id %q", i, e.ID)
			}
			if len(e.Key) > merkle.MaxKey || (!e.HasKey && len(e.Key) > 0) {
				t.Fatalf("entry %d: key %q (has key %v)", i, e.Key, e.HasKey)
			}
			if !e.Time.IsZero() && (e.Time.Year() < 1678 || e.Time.Year() > 2261) {
				t.Fatalf("entry %d: time %v", i, e.Time)
			}
			if e.Source != nil {
				t.Fatalf("entry %d: a body set a source position", i)
			}
		}
	})
}

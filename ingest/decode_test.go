package ingest_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

func decode(t *testing.T, body string, lim ingest.Limits) []ledger.Entry {
	t.Helper()
	es, err := ingest.Decode(strings.NewReader(body), lim)
	if err != nil {
		t.Fatalf("Decode(%.200q): %v", body, err)
	}
	return es
}

// decodeErr requires a *DecodeError and returns it.
func decodeErr(t *testing.T, body string, lim ingest.Limits) *ingest.DecodeError {
	t.Helper()
	es, err := ingest.Decode(strings.NewReader(body), lim)
	var de *ingest.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Decode(%.200q) = %d entries, %v; want a *DecodeError", body, len(es), err)
	}
	if es != nil {
		t.Errorf("Decode returned entries with an error")
	}
	return de
}

func ids(es []ledger.Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.ID)
	}
	return strings.Join(s, ",")
}

func TestDecodeFormats(t *testing.T) {
	const a, b = `{"id":"a","payload":1}`, `{"id":"b","payload":2}`
	for _, tc := range []struct {
		name, body string
	}{
		{"NDJSON", a + "\n" + b + "\n"},
		{"NDJSON without final newline", a + "\n" + b},
		{"NDJSON with CRLF", a + "\r\n" + b + "\r\n"},
		{"NDJSON with blank lines", "\n\n" + a + "\n\n \t \n" + b + "\n\n"},
		{"NDJSON with blank CRLF lines", "\r\n" + a + "\r\n\r\n" + b + "\r\n\r\n"},
		{"NDJSON with indentation", "  " + a + "  \n\t" + b + "\t\n"},
		{"array", "[" + a + "," + b + "]"},
		{"array with whitespace", " \r\n\t[\n  " + a + " ,\n  " + b + "\n]\n\n"},
		{"array spanning lines", "[\n{\n\"id\": \"a\",\n\"payload\": 1\n},\n{\"id\":\"b\",\n\"payload\":\n2}\n]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := decode(t, tc.body, ingest.Limits{})
			if ids(es) != "a,b" || string(es[0].Payload) != "1" || string(es[1].Payload) != "2" || !es[0].PayloadJSON {
				t.Errorf("got %+v", es)
			}
			// The same through a reader that returns one byte at a time.
			es2, err := ingest.Decode(iotest.OneByteReader(strings.NewReader(tc.body)), ingest.Limits{})
			if err != nil || ids(es2) != "a,b" {
				t.Errorf("one byte at a time: %v, %v", ids(es2), err)
			}
		})
	}
	// A single object is NDJSON of one line.
	if es := decode(t, a, ingest.Limits{}); ids(es) != "a" {
		t.Errorf("single object: %+v", es)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, body := range []string{"", " ", "\n", "\n\n  \n\t\n", "\r\n\r\n", "[]", "[ ]", "\n[\n]\n", " [\r\n\r\n] "} {
		es, err := ingest.Decode(strings.NewReader(body), ingest.Limits{})
		if !errors.Is(err, ingest.ErrEmpty) || es != nil {
			t.Errorf("Decode(%q) = %v, %v; want ErrEmpty", body, es, err)
		}
	}
}

func TestDecodeEventFields(t *testing.T) {
	ts := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name, line string
		want       ledger.Entry
	}{
		{"payload only", `{"payload":{"a":1}}`, ledger.Entry{Payload: []byte(`{"a":1}`), PayloadJSON: true}},
		{"payload compacted", `{"payload": {"a": 1}}`, ledger.Entry{Payload: []byte(`{"a":1}`), PayloadJSON: true}},
		{"payload deeply compacted", `{"payload": [ 1 , { "b" : [ true, null ] } , "x  y" ] }`, ledger.Entry{Payload: []byte(`[1,{"b":[true,null]},"x  y"]`), PayloadJSON: true}},
		{"payload numbers kept", `{"payload":[1.50, 1e3, -0, 12345678901234567890]}`, ledger.Entry{Payload: []byte(`[1.50,1e3,-0,12345678901234567890]`), PayloadJSON: true}},
		{"payload escapes kept", `{"payload":"\u003c\u0026\n\"<&>"}`, ledger.Entry{Payload: []byte(`"\u003c\u0026\n\"<&>"`), PayloadJSON: true}},
		{"payload string", `{"payload":"hello"}`, ledger.Entry{Payload: []byte(`"hello"`), PayloadJSON: true}},
		{"payload null", `{"payload":null}`, ledger.Entry{Payload: []byte(`null`), PayloadJSON: true}},
		{"payload_base64", `{"payload_base64":"AAEC/w=="}`, ledger.Entry{Payload: []byte{0, 1, 2, 0xff}}},
		{"empty payload_base64", `{"payload_base64":""}`, ledger.Entry{Payload: []byte{}}},
		{"id", `{"id":"ev-1","payload":1}`, ledger.Entry{ID: "ev-1", Payload: []byte(`1`), PayloadJSON: true}},
		{"unicode id", `{"id":"événement-\u2603","payload":1}`, ledger.Entry{ID: "événement-☃", Payload: []byte(`1`), PayloadJSON: true}},
		{"key", `{"key":"cust-42","payload":1}`, ledger.Entry{HasKey: true, Key: []byte("cust-42"), Payload: []byte(`1`), PayloadJSON: true}},
		{"empty key", `{"key":"","payload":1}`, ledger.Entry{HasKey: true, Key: []byte{}, Payload: []byte(`1`), PayloadJSON: true}},
		{"key_base64", `{"key_base64":"AAEC","payload":1}`, ledger.Entry{HasKey: true, Key: []byte{0, 1, 2}, Payload: []byte(`1`), PayloadJSON: true}},
		{"binary key_base64", `{"key_base64":"/w==","payload":1}`, ledger.Entry{HasKey: true, Key: []byte{0xff}, Payload: []byte(`1`), PayloadJSON: true}},
		{"empty key_base64", `{"key_base64":"","payload":1}`, ledger.Entry{HasKey: true, Key: []byte{}, Payload: []byte(`1`), PayloadJSON: true}},
		{"time UTC", `{"time":"2024-05-01T10:00:00Z","payload":1}`, ledger.Entry{Time: ts("2024-05-01T10:00:00Z"), Payload: []byte(`1`), PayloadJSON: true}},
		{"time with offset", `{"time":"2024-05-01T12:00:00+02:00","payload":1}`, ledger.Entry{Time: ts("2024-05-01T10:00:00Z"), Payload: []byte(`1`), PayloadJSON: true}},
		{"time with nanoseconds", `{"time":"2024-05-01T10:00:00.123456789Z","payload":1}`, ledger.Entry{Time: ts("2024-05-01T10:00:00.123456789Z"), Payload: []byte(`1`), PayloadJSON: true}},
		{"time with milliseconds", `{"time":"2024-05-01T10:00:00.5-07:00","payload":1}`, ledger.Entry{Time: ts("2024-05-01T17:00:00.5Z"), Payload: []byte(`1`), PayloadJSON: true}},
		{"earliest year", `{"time":"1678-01-01T00:00:00Z","payload":1}`, ledger.Entry{Time: ts("1678-01-01T00:00:00Z"), Payload: []byte(`1`), PayloadJSON: true}},
		{"null fields are absent", `{"id":null,"key":null,"key_base64":null,"time":null,"payload":1,"payload_base64":null}`, ledger.Entry{Payload: []byte(`1`), PayloadJSON: true}},
		{"max id", `{"id":"` + strings.Repeat("i", merkle.MaxID) + `","payload":1}`, ledger.Entry{ID: strings.Repeat("i", merkle.MaxID), Payload: []byte(`1`), PayloadJSON: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, body := range []string{tc.line + "\n", "[" + tc.line + "]"} {
				es := decode(t, body, ingest.Limits{})
				if len(es) != 1 {
					t.Fatalf("%q: %d entries", body, len(es))
				}
				e := es[0]
				w := tc.want
				if e.ID != w.ID || e.HasKey != w.HasKey || !bytes.Equal(e.Key, w.Key) || !e.Time.Equal(w.Time) ||
					e.Source != nil || !bytes.Equal(e.Payload, w.Payload) || e.PayloadJSON != w.PayloadJSON {
					t.Errorf("%q:\n got %+v\nwant %+v", body, e, w)
				}
				if e.Payload == nil {
					t.Errorf("%q: nil payload", body)
				}
				if w.Time.IsZero() != e.Time.IsZero() {
					t.Errorf("%q: time %v", body, e.Time)
				}
			}
		})
	}
}

func TestDecodeEventErrors(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
	}{
		{"no payload", `{"id":"x"}`, "payload or payload_base64 is required"},
		{"empty object", `{}`, "payload or payload_base64 is required"},
		{"null payload_base64 only", `{"payload_base64":null}`, "payload or payload_base64 is required"},
		{"both payloads", `{"payload":1,"payload_base64":"AA=="}`, "both payload and payload_base64"},
		{"both keys", `{"key":"k","key_base64":"AA==","payload":1}`, "both key and key_base64"},
		{"bad payload_base64", `{"payload_base64":"***"}`, "payload_base64"},
		{"unpadded payload_base64", `{"payload_base64":"AA"}`, "payload_base64"},
		{"URL-safe payload_base64", `{"payload_base64":"_w=="}`, "payload_base64"},
		{"bad key_base64", `{"key_base64":"A","payload":1}`, "key_base64"},
		{"unknown field", `{"payload":1,"extra":2}`, `unknown field "extra"`},
		{"misspelled field", `{"Payload":1,"paylod":2}`, `unknown field "paylod"`},
		{"id too long", `{"id":"` + strings.Repeat("i", merkle.MaxID+1) + `","payload":1}`, "id of 1025 bytes"},
		{"key too long", `{"key":"` + strings.Repeat("k", merkle.MaxKey+1) + `","payload":1}`, "key of 65536 bytes"},
		{"bad time", `{"time":"yesterday","payload":1}`, `time "yesterday" is not RFC 3339`},
		{"date only", `{"time":"2024-05-01","payload":1}`, "not RFC 3339"},
		{"time without zone", `{"time":"2024-05-01T10:00:00","payload":1}`, "not RFC 3339"},
		{"time with space", `{"time":"2024-05-01 10:00:00Z","payload":1}`, "not RFC 3339"},
		{"time too early", `{"time":"1500-01-01T00:00:00Z","payload":1}`, "outside the range of Unix nanoseconds"},
		{"time too late", `{"time":"2300-01-01T00:00:00Z","payload":1}`, "outside the range of Unix nanoseconds"},
		{"zero time", `{"time":"0001-01-01T00:00:00Z","payload":1}`, "outside the range"},
		{"numeric time", `{"time":1714557600,"payload":1}`, "cannot unmarshal number"},
		{"numeric id", `{"id":5,"payload":1}`, "cannot unmarshal number"},
		{"array event", `[1]`, ""},
		{"string event", `"x"`, "cannot unmarshal string"},
		{"truncated", `{"payload":`, "unexpected end of JSON"},
		{"bad payload", `{"payload":tru}`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, body := range []string{tc.line + "\n", "[" + tc.line + "]"} {
				if (tc.name == "array event" || tc.name == "truncated") && body[0] == '[' {
					continue // not the same mistake inside an array
				}
				de := decodeErr(t, body, ingest.Limits{})
				if de.Line != 1 {
					t.Errorf("%q: line %d, want 1", body, de.Line)
				}
				if !strings.Contains(de.Err, tc.want) {
					t.Errorf("%q: error %q, want it to mention %q", body, de.Err, tc.want)
				}
				if !strings.Contains(de.Error(), fmt.Sprintf("line %d", de.Line)) {
					t.Errorf("Error() = %q does not name the line", de.Error())
				}
			}
		})
	}
}

// Line numbers name the line of the first problem, in both formats.
func TestDecodeErrorLines(t *testing.T) {
	const good = `{"id":"g","payload":1}`
	for _, tc := range []struct {
		name, body string
		line, item int
	}{
		// NDJSON.
		{"NDJSON first line", `{oops}` + "\n" + good, 1, 0},
		{"NDJSON third line", good + "\n" + good + "\n" + `{"payload":}` + "\n" + good, 3, 2},
		{"NDJSON after blank lines", good + "\n\n\n" + `{"payload":}`, 4, 1},
		{"NDJSON after leading blank lines", "\n\n" + good + "\n" + `{"payload":}`, 4, 1},
		{"NDJSON first line after leading blank lines", "\n\n\n" + `{"payload":}`, 4, 0},
		{"NDJSON after leading CRLF blank lines", "\r\n\r\n" + `{"payload":}`, 3, 0},
		{"NDJSON CRLF", good + "\r\n" + good + "\r\n" + `{"id":"x"}` + "\r\n", 3, 2},
		{"NDJSON invalid event", good + "\n" + `{"id":"x"}`, 2, 1},
		{"NDJSON unknown field", good + "\n" + good + "\n" + `{"payload":1,"x":1}`, 3, 2},
		{"NDJSON trailing garbage", good + "\n" + good + " x", 2, 1},
		{"NDJSON unterminated last line", good + "\n" + `{"payload":1`, 2, 1},
		{"NDJSON array on a later line", good + "\n" + `[` + good + `]`, 2, 1},
		// Arrays.
		{"array first line", `[{oops}]`, 1, 0},
		{"array syntax error on line 3", "[\n" + good + ",\n" + `{"payload":}` + "\n]", 3, 1},
		{"array invalid event on line 3", "[\n" + good + ",\n" + `{"id":"x"}` + "\n]", 3, 1},
		{"array invalid event after blank lines", "[\n" + good + ",\n\n\n" + `{"id":"x"}` + "\n]", 5, 1},
		{"array invalid event with comma on its line", "[\n" + good + "\n,\n" + `{"id":"x"}` + "\n]", 4, 1},
		{"array unknown field on line 3", "[\n" + good + ",\n" + `{"payload":1,"x":1}` + "\n]", 3, 1},
		{"array type error on line 3", "[\n" + good + ",\n" + `{"id":5,"payload":1}` + "\n]", 3, 1},
		{"array type error deep in an event", "[\n" + good + ",\n{\n\"payload\": 1,\n\"id\": 5\n}\n]", 5, 1},
		{"array syntax error deep in an event", "[\n" + good + ",\n{\n\"payload\": 1,\n\"id\": ]\n}\n]", 5, 1},
		{"array event of the wrong type on line 3", "[\n" + good + ",\n5\n]", 3, 1},
		{"array type error after comma and blank lines", "[\n" + good + ",\n\n\n" + `{"id":5,"payload":1}` + "\n]", 5, 1},
		{"array type error with the comma on the line", "[\n" + good + "\n," + `{"id":5,"payload":1}` + "\n]", 3, 1},
		{"array after leading blank lines", "\n\n[\n" + `{"payload":}` + "\n]", 4, 0},
		{"array invalid event after leading blank lines", "\n\n[\n" + `{"id":"x"}` + "\n]", 4, 0},
		{"array missing comma", "[\n" + good + "\n" + good + "\n]", 3, 1},
		{"array unterminated", "[\n" + good + ",\n" + good + "\n", 3, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			de := decodeErr(t, tc.body, ingest.Limits{})
			if de.Line != tc.line || de.Item != tc.item {
				t.Errorf("line %d item %d (%v), want line %d item %d", de.Line, de.Item, de, tc.line, tc.item)
			}
		})
	}
}

func TestDecodeTrailingData(t *testing.T) {
	for _, body := range []string{
		`[{"payload":1}] {"payload":2}`,
		`[{"payload":1}][{"payload":2}]`,
		`[{"payload":1}] x`,
		`[{"payload":1}]]`,
		`{"payload":1} {"payload":2}`,
		`{"payload":1}}`,
		`{"payload":1} x`,
	} {
		decodeErr(t, body, ingest.Limits{})
	}
}

func TestDecodeLongLines(t *testing.T) {
	// Lines longer than the 64 KiB read buffer are read whole.
	for _, n := range []int{64<<10 - 20, 64 << 10, 64<<10 + 1, 200 << 10, 1 << 20} {
		big := strings.Repeat("x", n)
		body := `{"id":"a","payload":1}` + "\n" + `{"id":"big","payload":"` + big + `"}` + "\n" + `{"id":"c","payload":3}` + "\n"
		es := decode(t, body, ingest.Limits{})
		if ids(es) != "a,big,c" || len(es[1].Payload) != n+2 || string(es[1].Payload) != `"`+big+`"` {
			t.Fatalf("n=%d: got %d entries", n, len(es))
		}
		// And the line after a long line is counted right.
		de := decodeErr(t, body+"\n"+`{"id":"bad"}`+"\n", ingest.Limits{})
		if de.Line != 5 || de.Item != 3 {
			t.Errorf("n=%d: error at line %d item %d, want line 5 item 3", n, de.Line, de.Item)
		}
		// Through a slow reader too.
		es, err := ingest.Decode(iotest.HalfReader(strings.NewReader(body)), ingest.Limits{})
		if err != nil || ids(es) != "a,big,c" {
			t.Errorf("n=%d: half reader: %v", n, err)
		}
		// As an array.
		arr := "[\n" + strings.Join(strings.Split(strings.TrimSpace(body), "\n"), ",\n") + "\n]"
		es = decode(t, arr, ingest.Limits{})
		if ids(es) != "a,big,c" || len(es[1].Payload) != n+2 {
			t.Errorf("n=%d: array: %d entries", n, len(es))
		}
	}
	// A long line with no newline at all, base64 payload.
	big := bytes.Repeat([]byte{0xab}, 300<<10)
	es := decode(t, fmt.Sprintf(`{"payload_base64":%q}`, b64(big)), ingest.Limits{})
	if len(es) != 1 || !bytes.Equal(es[0].Payload, big) || es[0].PayloadJSON {
		t.Errorf("long base64 line: %d entries", len(es))
	}
}

func TestDecodeMaxEvents(t *testing.T) {
	lines := func(n int) []string {
		var s []string
		for i := 0; i < n; i++ {
			s = append(s, fmt.Sprintf(`{"id":"e%d","payload":%d}`, i, i))
		}
		return s
	}
	lim := ingest.Limits{MaxEvents: 3}
	// Exactly the limit is fine, in both formats.
	if es := decode(t, strings.Join(lines(3), "\n"), lim); len(es) != 3 {
		t.Errorf("NDJSON at the limit: %d", len(es))
	}
	if es := decode(t, "["+strings.Join(lines(3), ",")+"]", lim); len(es) != 3 {
		t.Errorf("array at the limit: %d", len(es))
	}
	// Blank lines do not count.
	if es := decode(t, "\n\n"+strings.Join(lines(3), "\n\n")+"\n\n", lim); len(es) != 3 {
		t.Errorf("NDJSON with blank lines: %d", len(es))
	}
	de := decodeErr(t, strings.Join(lines(4), "\n"), lim)
	if de.Line != 4 || de.Item != 3 || !strings.Contains(de.Err, "more than 3 events") {
		t.Errorf("NDJSON over the limit: %v (line %d item %d)", de, de.Line, de.Item)
	}
	de = decodeErr(t, "[\n"+strings.Join(lines(5), ",\n")+"\n]", lim)
	if de.Item != 3 || !strings.Contains(de.Err, "more than 3 events") {
		t.Errorf("array over the limit: %v (line %d item %d)", de, de.Line, de.Item)
	}
	if de.Line != 5 {
		t.Errorf("array over the limit: line %d, want 5 (the 4th event's line)", de.Line)
	}
	// No limit.
	if es := decode(t, strings.Join(lines(1000), "\n"), ingest.Limits{}); len(es) != 1000 {
		t.Errorf("no limit: %d", len(es))
	}
}

func TestDecodeMaxPayload(t *testing.T) {
	lim := ingest.Limits{MaxPayload: 7}
	// The limit applies to the stored (compacted) payload: {"a":1} is 7 bytes.
	for _, body := range []string{`{"payload": {"a" : 1}}`, `{"payload":{"a":1}}`, `{"payload_base64":"MTIzNDU2Nw=="}`, `{"payload":"12345"}`} {
		if es := decode(t, body, lim); len(es) != 1 {
			t.Errorf("%s: %d entries", body, len(es))
		}
		if es := decode(t, "["+body+"]", lim); len(es) != 1 {
			t.Errorf("[%s]: %d entries", body, len(es))
		}
	}
	for _, body := range []string{`{"payload":{"a":12}}`, `{"payload_base64":"MTIzNDU2Nzg="}`, `{"payload":"123456"}`} {
		de := decodeErr(t, `{"payload":1}`+"\n"+body, lim)
		if de.Line != 2 || de.Item != 1 || !strings.Contains(de.Err, "payload of 8 bytes (max 7)") {
			t.Errorf("%s: %v", body, de)
		}
		de = decodeErr(t, "[\n"+`{"payload":1}`+",\n"+body+"]", lim)
		if de.Line != 3 || de.Item != 1 || !strings.Contains(de.Err, "(max 7)") {
			t.Errorf("[%s]: %v (line %d)", body, de, de.Line)
		}
	}
}

// Errors from the reader come back unwrapped, so callers can map them (a
// *http.MaxBytesError becomes 413).
func TestDecodeReaderError(t *testing.T) {
	boom := errors.New("boom")
	for _, body := range []string{`{"payload":1}` + "\n" + `{"payload":2}` + "\n", `[{"payload":1},{"payload":2}`, "\n\n"} {
		r := io.MultiReader(strings.NewReader(body), iotest.ErrReader(boom))
		_, err := ingest.Decode(r, ingest.Limits{})
		if !errors.Is(err, boom) {
			t.Errorf("%q then an error: got %v, want the reader's error", body, err)
		}
	}
	_, err := ingest.Decode(iotest.ErrReader(boom), ingest.Limits{})
	if !errors.Is(err, boom) {
		t.Errorf("failing reader: got %v", err)
	}
}

func TestDecodeErrorString(t *testing.T) {
	e := &ingest.DecodeError{Line: 3, Item: 2, Err: "boom"}
	if got := e.Error(); got != "line 3 (event 2): boom" {
		t.Errorf("Error() = %q", got)
	}
	e = &ingest.DecodeError{Line: 1, Item: -1, Err: "boom"}
	if got := e.Error(); got != "line 1: boom" {
		t.Errorf("Error() = %q", got)
	}
}

func TestEventEntry(t *testing.T) {
	k, p, ts := "k", "AAE=", "2024-05-01T10:00:00Z"
	ev := ingest.Event{ID: "x", Key: &k, Time: &ts, PayloadBase64: &p}
	e, err := ev.Entry(ingest.Limits{})
	if err != nil || e.ID != "x" || string(e.Key) != "k" || !e.HasKey || e.Time.Unix() != 1714557600 || !bytes.Equal(e.Payload, []byte{0, 1}) || e.PayloadJSON {
		t.Errorf("Entry() = %+v, %v", e, err)
	}
	ev = ingest.Event{ID: "\xff", Payload: []byte("1")}
	if _, err := ev.Entry(ingest.Limits{}); err == nil {
		t.Error("an id that is not UTF-8 was accepted")
	}
	ev = ingest.Event{Payload: []byte("{not json")}
	if _, err := ev.Entry(ingest.Limits{}); err == nil {
		t.Error("a payload that is not JSON was accepted")
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// A syntax error inside an array element names the element's own line:
// encoding/json's offset counted only the bytes its scanner read, not the
// '[', commas and space the Token API skipped, so it named an earlier line.
func TestDecodeArraySyntaxErrorLine(t *testing.T) {
	for _, tc := range []struct {
		body       string
		line, item int
	}{
		{"[\n\n\n{oops}]", 4, 0},
		{"[\n\n\n{\n\"payload\":1,\n\n\nx}]", 8, 0},
		{"[\n" + `{"payload":1}` + ",\n\n\n\n{\n\"id\":\"a\",\n\n\n\"payload\":[1,2,\n]}" + "\n]", 11, 1},
	} {
		de := decodeErr(t, tc.body, ingest.Limits{})
		if de.Line != tc.line || de.Item != tc.item {
			t.Errorf("%q: line %d item %d (%v), want line %d item %d", tc.body, de.Line, de.Item, de, tc.line, tc.item)
		}
	}
}

// A one-event body costs a few small allocations, not a 64 KiB read
// buffer: the buffer is pooled, the entry's bytes share one allocation.
func TestDecodeSmallBodyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	body := `{"id":"0b9d5e1c-6a52-4c1e-9a0e-3f1f6c1d2e3a","payload":{"account":"acct-000042","amount":17,"pad":"` + strings.Repeat("x", 200) + `"}}` + "\n"
	decode(t, body, ingest.Limits{}) // warm the pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 200
	allocs := testing.AllocsPerRun(n, func() {
		if _, err := ingest.Decode(strings.NewReader(body), ingest.Limits{}); err != nil {
			t.Fatal(err)
		}
	})
	runtime.ReadMemStats(&after)
	perRun := float64(after.TotalAlloc-before.TotalAlloc) / (n + 1)
	t.Logf("%.0f allocations, %.0f bytes per one-event body of %d bytes", allocs, perRun, len(body))
	if allocs > 6 || perRun > 2*float64(len(body)) {
		t.Errorf("%.0f allocations and %.0f bytes per one-event body of %d bytes; want at most 6 and twice the body", allocs, perRun, len(body))
	}
}

// Entries own their bytes: decoding the next body (which reuses the pooled
// read buffer) leaves them as they were, and appending to one payload does
// not write over the next.
func TestDecodeEntriesOwnTheirBytes(t *testing.T) {
	es := decode(t, `{"key":"k1","payload":{"a": 1}}`+"\n"+`{"key":"k2","payload":[2]}`+"\n", ingest.Limits{})
	for range 3 {
		decode(t, `{"key":"zz","payload":{"zzzzz": 9}}`+"\n"+`{"key":"zz","payload":"zzzzzzz"}`+"\n", ingest.Limits{})
	}
	_ = append(es[0].Payload, "XXXX"...)
	_ = append(es[0].Key, "XXXX"...)
	if string(es[0].Payload) != `{"a":1}` || string(es[1].Payload) != `[2]` || string(es[0].Key) != "k1" || string(es[1].Key) != "k2" {
		t.Errorf("entries changed: %q %q %q %q", es[0].Payload, es[1].Payload, es[0].Key, es[1].Key)
	}
}

// A body that arrives a byte at a time decodes in linear time: the fast
// path tries an event again only once its bytes have doubled (it took
// quadratic time, hours for this body, when it retried at every byte).
func TestDecodeOneByteAtATime(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	body := `{"id":"a","payload":"` + big + `"}` + "\n" + `{"id":"b","payload":1}`
	es, err := ingest.Decode(iotest.OneByteReader(strings.NewReader(body)), ingest.Limits{})
	if err != nil || ids(es) != "a,b" || len(es[0].Payload) != len(big)+2 {
		t.Fatalf("got %d entries, %v", len(es), err)
	}
}

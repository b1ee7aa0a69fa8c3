package ingest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// diffSeeds are FuzzDecode's seeds and the edge cases of issue #13.
func diffSeeds() []string {
	big := func(n int) string { return `{"payload":"` + strings.Repeat("x", n-2) + `"}` }
	s := []string{
		"", "\n\n", "[]", `{"payload":1}`,
		`{"id":"a","key":"k","time":"2024-05-01T10:00:00Z","payload":{"a": [1, 2]}}` + "\n" + `{"payload_base64":"AAE="}`,
		`[{"id":"a","payload":"x"},{"key_base64":"/w==","payload":null}]`,
		"[\n{\"id\":\"a\",\"payload\":1},\n{\"id\":5,\"payload\":1}\n]",
		"{\"payload\":1}\r\n\r\n{\"payload\":}\r\n",
		`{"payload":1,"payload_base64":"AA=="}`, `{"payload":1,"extra":2}`,
		`{"time":"1500-01-01T00:00:00Z","payload":1}`, `[{"payload":1}] x`, `{"payload":1} {"payload":2}`,
		`{"payload":"` + strings.Repeat("x", 1000) + `"}`, "\xef\xbb\xbf{\"payload\":1}", `[{"payload":1},`,
		`{"payload":"\u2028<&>"}`,
		// Escapes, surrogates and invalid UTF-8 in ids, keys and payloads.
		`{"id":"\u0041\u00e9\ud83d\ude00","payload":1}`, `{"id":"a\ud800","payload":1}`, `{"id":"\ufffd","payload":"\ud800"}`,
		`{"id":"a` + "\xff" + `","payload":1}`, `{"key":"` + "\xc0\xaf" + `","payload":1}`, `{"id":"x","payload":"` + "\xff\xfe" + `"}`,
		`{"\u0069d":"x","payload":1}`, `{"key_base64":"\u0041A==","payload":1}`, `{"payload_base64":"AA\r\n=="}`,
		`{"payload_base64":"AA\\r\\n=="}`, `{"time":"2024-05-01T10:00:00\u005a","payload":1}`,
		// Numbers.
		`{"payload":-0}`, `{"payload":1e400}`, `{"payload":01}`, `{"payload":-}`, `{"payload":1.}`, `{"payload":.5}`,
		`{"payload":1E+2}`, `{"payload":[1e-2,0.0,-0.5e+7]}`, `{"payload":2 }`, `{"payload":2x}`,
		// Nesting.
		`{"payload":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
		`{"payload":` + strings.Repeat(`{"a":`, 250) + "1" + strings.Repeat("}", 250) + `}`,
		`{"payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		// Whitespace, BOM, commas.
		"{\"payload\" :\t{ \"a\" : 1 ,\r\n\"b\":[ ] } }", "\r\n{\"payload\":1}\r\n", "[\r\n{\"payload\":1}\r\n,\r\n{\"payload\":2}\r\n]",
		"\xef\xbb\xbf[{\"payload\":1}]", `[{"payload":1},]`, `[,{"payload":1}]`, `{"payload":1,}`, `{,"payload":1}`,
		`[{"payload":1}{"payload":2}]`, `[{"payload":1}}`, `[}`, "[\n\n\n{oops}]", `{"payload":[1,]}`, `{"payload":{"a":1,}}`,
		"{\"payload\":\n1}", "[{\"payload\":\n1}]", `null`, `[null]`, `[1,2]`, `"x"`, `5`, "5\n", `{}`, `[{}]`,
		// Duplicates, nulls and case variants.
		`{"id":"a","id":"b","payload":1}`, `{"id":"a","id":null,"payload":1}`, `{"payload":1,"payload":[2, 3]}`,
		`{"payload":1,"payload":null}`, `{"payload":null,"payload_base64":null}`, `{"ID":"a","Payload":1}`,
		`{"PAYLOAD":1,"Key":"k"}`, `{"payload":1,"id":null,"key":null,"time":null,"key_base64":null}`,
		`{"kęy":"k","payload":1}`, `{"payload":1,"K":"x"}`, "{\"\u212aey\":\"k\",\"payload\":1}",
		`{"id":"","payload":1}`, `{"key":"","payload":1}`, `{"key_base64":"","payload_base64":""}`,
		`{"id":5,"payload":1}`, `{"id":{"a":1},"payload":1}`, `{"time":5,"id":"\ud800","payload":1}`,
		// Limits, at and past them.
		big(64), big(65), big(63), strings.Repeat(`{"payload":1}`+"\n", 3), strings.Repeat(`{"payload":1}`+"\n", 4),
		"[" + strings.Repeat(`{"payload":1},`, 3) + `{"payload":1}]`, "[" + strings.Repeat(`{"payload":1},`, 2) + `{"payload":1}]`,
		`{"id":"` + strings.Repeat("i", merkle.MaxID) + `","payload":1}`, `{"id":"` + strings.Repeat("i", merkle.MaxID+1) + `","payload":1}`,
	}
	return s
}

// FuzzDecodeDiff feeds each input to Decode and to refDecode, the
// encoding/json decoder it replaced (decode_ref_test.go), and requires the
// same entries, field by field and byte for byte, or the same error: both
// ErrEmpty, or a *DecodeError with the same line, item, limit and text.
// Decode also reads the input through readers that return it in pieces,
// so events cross its buffer's edges.
func FuzzDecodeDiff(f *testing.F) {
	for _, s := range diffSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range []Limits{{}, {MaxEvents: 3, MaxPayload: 64}} {
			want, werr := refDecode(bytes.NewReader(data), lim)
			readers := map[string]io.Reader{
				"whole": bytes.NewReader(data),
				"half":  iotest.HalfReader(bytes.NewReader(data)),
			}
			if len(data) < 300 {
				readers["byte"] = iotest.OneByteReader(bytes.NewReader(data))
			}
			for name, r := range readers {
				got, gerr := Decode(r, lim)
				if msg := diffResults(got, gerr, want, werr); msg != "" {
					t.Fatalf("%q, %+v, %s reader: %s", data, lim, name, msg)
				}
			}
		}
	})
}

func TestDecodeDiffSeeds(t *testing.T) {
	for _, s := range diffSeeds() {
		for _, lim := range []Limits{{}, {MaxEvents: 3, MaxPayload: 64}} {
			want, werr := refDecode(strings.NewReader(s), lim)
			got, gerr := Decode(strings.NewReader(s), lim)
			if msg := diffResults(got, gerr, want, werr); msg != "" {
				t.Errorf("%.300q, %+v: %s", s, lim, msg)
			}
		}
	}
}

// diffResults describes how Decode's result differs from the oracle's.
func diffResults(got []ledger.Entry, gerr error, want []ledger.Entry, werr error) string {
	if gerr != nil || werr != nil {
		var gd, wd *DecodeError
		switch {
		case errors.Is(werr, ErrEmpty) && errors.Is(gerr, ErrEmpty):
		case errors.As(werr, &wd) && errors.As(gerr, &gd):
			if *gd != *wd {
				return "got " + fmtDE(gd) + ", want " + fmtDE(wd)
			}
		default:
			return "got error " + errString(gerr) + ", want " + errString(werr)
		}
		if got != nil {
			return "entries with an error"
		}
		return ""
	}
	if len(got) != len(want) {
		return "got " + itoa(len(got)) + " entries, want " + itoa(len(want))
	}
	for i := range got {
		if m := diffEntry(&got[i], &want[i]); m != "" {
			return "entry " + itoa(i) + ": " + m
		}
	}
	return ""
}

func diffEntry(g, w *ledger.Entry) string {
	gn, go_ := g.Time.Zone()
	wn, wo := w.Time.Zone()
	switch {
	case g.ID != w.ID:
		return "id " + g.ID + " want " + w.ID
	case g.HasKey != w.HasKey || !bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil):
		return "key differs"
	case !g.Time.Equal(w.Time) || g.Time.IsZero() != w.Time.IsZero() || gn != wn || go_ != wo:
		return "time " + g.Time.String() + " want " + w.Time.String()
	case !bytes.Equal(g.Payload, w.Payload) || (g.Payload == nil) != (w.Payload == nil):
		return "payload " + string(g.Payload) + " want " + string(w.Payload)
	case g.PayloadJSON != w.PayloadJSON || g.Marks != w.Marks || g.Source != nil || w.Source != nil ||
		g.PayloadHash != nil || w.PayloadHash != nil || g.Headers != nil || w.Headers != nil:
		return "marks or other fields differ"
	}
	return ""
}

func fmtDE(d *DecodeError) string {
	return d.Error() + " (line " + itoa(d.Line) + ", item " + itoa(d.Item) + ", exceeds " + d.Exceeds + ")"
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// Large bodies of every form, read whole and in pieces, decode as the
// oracle decodes them: events cross the small (4 KiB) and large (64 KiB)
// windows' edges, and the bodies hold more than 1,024 events.
func TestDecodeDiffLarge(t *testing.T) {
	var nd, crlf, pretty, mixed strings.Builder
	pretty.WriteString("[\n")
	for i := range 1500 {
		pad := strings.Repeat("p", i%300)
		ev := `{"id":"ev-` + itoa(i) + `","key":"k` + itoa(i%7) + `","time":"2024-05-01T10:00:00.` + itoa(100+i%900) + `+02:00","payload":{"n":` + itoa(i) + `,"pad":"` + pad + `","a":[1,2.5e3,true,null,"\u00e9\n"]}}`
		nd.WriteString(ev + "\n")
		crlf.WriteString("\r\n" + ev + "\r\n")
		if i > 0 {
			pretty.WriteString(",\n")
		}
		pretty.WriteString(`  { "id" : "ev-` + itoa(i) + `",` + "\n" + `    "payload" : { "n" : ` + itoa(i) + ` , "pad" : [ "` + pad + `" ] } }`)
		switch i % 4 {
		case 0:
			mixed.WriteString(`{"payload_base64":"` + b64Test(pad) + `","key_base64":"AAE="}` + "\n")
		case 1:
			mixed.WriteString(`{"ID":"ev-` + itoa(i) + `","payload":1}` + "\n") // the slow path
		case 2:
			mixed.WriteString(`{"id":"\u0065v-` + itoa(i) + `","payload":"` + pad + `"}` + "\n")
		default:
			mixed.WriteString(`{"payload" : [ ` + itoa(i) + ` ] }` + "\n")
		}
	}
	pretty.WriteString("\n]\n")
	bad := nd.String() + `{"payload":1,"id":5}` + "\n"
	for name, body := range map[string]string{"ndjson": nd.String(), "crlf": crlf.String(), "pretty array": pretty.String(), "mixed": mixed.String(), "error at the end": bad} {
		for _, lim := range []Limits{{}, {MaxEvents: 1200, MaxPayload: 200}} {
			want, werr := refDecode(strings.NewReader(body), lim)
			for rname, r := range map[string]io.Reader{"whole": strings.NewReader(body), "half": iotest.HalfReader(strings.NewReader(body)), "data+err": iotest.DataErrReader(strings.NewReader(body))} {
				got, gerr := Decode(r, lim)
				if msg := diffResults(got, gerr, want, werr); msg != "" {
					t.Errorf("%s, %+v, %s reader: %s", name, lim, rname, msg)
				}
			}
		}
	}
}

func b64Test(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

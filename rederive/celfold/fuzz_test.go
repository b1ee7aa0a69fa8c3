package celfold

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzCELDecodeJSON checks the event decoder against encoding/json: the
// same texts are valid (but for numbers out of float64 range, which
// encoding/json accepts as text) and decode to the same values.
func FuzzCELDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"p-1","type":"transfer","from":"a","to":"b","amount":1234,"memo":"\u00e9\n"}`,
		`[1,-0,0.5,1e2,9223372036854775808,{"a":{"a":[]}},null,true,false]`,
		`"\ud83d\ude00\ud800"`, "\"\xff\"", `{"a":1,"a":2}`, `  1  `, `1e400`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeEventJSON(data)
		valid := json.Valid(data)
		if err != nil {
			if valid && !strings.Contains(err.Error(), "out of range") && !strings.Contains(err.Error(), "nested too deeply") {
				t.Fatalf("%q: %v, but encoding/json accepts it", data, err)
			}
			return
		}
		if !valid {
			t.Fatalf("%q: decoded, but encoding/json rejects it", data)
		}
		checkJSONAgainstStdlib(t, data, v)
	})
}

// FuzzCELDecodeState checks that decoding any bytes as a state never
// panics, and that decoded states re-encode canonically.
func FuzzCELDecodeState(f *testing.F) {
	d := &celDerivation{}
	for _, s := range []string{`{"b":[1,2.5,{"c":null}],"a":"x"}`, `[true,false,"s"]`, `{}`} {
		v, _ := decodeEventJSON([]byte(s))
		b, _ := d.Encode(v)
		f.Add(b)
	}
	f.Add([]byte{1, 't', 2, 3, 4})
	f.Add([]byte{1, 'O', 'm', 1, 'i', 2, 'D', 4})
	f.Add([]byte{1, 'N', 4, '1', '.', '5', '0'})
	f.Add([]byte{1, 'l', 2, 'N', 4, '1', 'e', '+', '3', 'N', 2, '-', '0'})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] != celStateV1 {
			return
		}
		r := celStateReader{b: data[1:]} // no recover: panics surface here
		v, err := r.value(0)
		if err != nil || len(r.b) != 0 {
			return
		}
		enc, err := appendCELValue([]byte{celStateV1}, v, 0)
		if err != nil {
			t.Fatalf("decoded %v does not encode: %v", v, err)
		}
		r2 := celStateReader{b: enc[1:]}
		v2, err := r2.value(0)
		if err != nil {
			t.Fatalf("canonical encoding %x does not decode: %v", enc, err)
		}
		enc2, _ := appendCELValue([]byte{celStateV1}, v2, 0)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not canonical: %x vs %x", enc, enc2)
		}
	})
}

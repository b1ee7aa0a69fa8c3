package ingest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzCompactValid checks the in-place compaction against json.Compact.
func FuzzCompactValid(f *testing.F) {
	for _, s := range []string{`{ "a" : [ 1 , "x y\\" z" ] }`, "\"\\\\\" \"", " \t\n1\r ", `{"k":"\u00e9 \n"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		if got := compactValid(bytes.Clone(b)); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compactValid(%q) = %q, want %q", b, got, want.Bytes())
		}
	})
}

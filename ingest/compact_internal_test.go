package ingest

import (
	"bytes"
	"encoding/binary"
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

// special finds every byte a JSON string ends or escapes at, in any of the
// 8 places.
func TestSpecial(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			b := []byte("aaaaaaaa")
			b[pos] = byte(c)
			want := c == '"' || c == '\\' || c < 0x20
			got := special(binary.LittleEndian.Uint64(b)) != 0
			if want && !got {
				t.Fatalf("byte %#x at %d not found", c, pos)
			}
			if !want && got && pos == 0 {
				t.Errorf("byte %#x alone is flagged", c)
			}
		}
	}
}

package ingest

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/auditd/auditd/internal/jsonscan"
)

// payloadCases are edge cases of the JSON grammar and of UTF-8 that the
// one-pass scan must judge as json.Valid and utf8.Valid do.
var payloadCases = []string{
	``, ` `, `{}`, `[]`, ` {"a":1} `, `{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`,
	`"x"`, `"`, `"\"`, `"\u00e9"`, `"\u00g9"`, `"\ud800"`, `"\x"`, "\"a\tb\"", "\"\x7f\"", `"\/"`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `-1.5e10`, `1e5.5`, `+1`, `0x10`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `[true,false,null]`, `{"a":[{"b":[]}]}`, `[[]]]`, `[[]`,
	"\"\xff\"", "\"\xc3\xa9\"", "\"\xef\xbf\xbd\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xe2\x82\"",
	"\xff", "{\"a\":1}\xff", "\xef\xbb\xbf{}", "\xc3\xa9", "[1]\n", "\r\n\t[1]\t",
	strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth),
	strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1),
	strings.Repeat(`{"a":`, jsonscan.MaxDepth) + "1" + strings.Repeat("}", jsonscan.MaxDepth),
	strings.Repeat(`{"a":`, jsonscan.MaxDepth+1) + "1" + strings.Repeat("}", jsonscan.MaxDepth+1),
}

func checkPayloadKind(t *testing.T, b []byte) {
	t.Helper()
	j, u := payloadKind(b)
	if wj, wu := json.Valid(b), utf8.Valid(b); j != wj || u != wu {
		t.Fatalf("payloadKind(%.80q) = json %v, utf8 %v; json.Valid %v, utf8.Valid %v", b, j, u, wj, wu)
	}
}

func TestPayloadKind(t *testing.T) {
	for _, c := range payloadCases {
		checkPayloadKind(t, []byte(c))
	}
	// Each special byte at each place of a string's eight-byte words (the
	// scan skips plain bytes eight at a time).
	for _, sp := range []string{`"`, `\\`, `\"`, "\x1f", "\x00", "\x7f", "\x80", "\xc3\xa9", "\xff", " ", "~"} {
		for n := range 24 {
			for at := 0; at <= n; at++ {
				s := strings.Repeat("a", at) + sp + strings.Repeat("b", n-at)
				checkPayloadKind(t, []byte(`"`+s+`"`))
				checkPayloadKind(t, []byte(`{"k":"`+s+`","z":1}`))
			}
		}
	}
}

// FuzzPayloadKind checks the one-pass scan against json.Valid and
// utf8.Valid: the marks it sets are part of the leaf.
func FuzzPayloadKind(f *testing.F) {
	for _, c := range payloadCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPayloadKind(t, b) })
}

func BenchmarkPayloadKind(b *testing.B) {
	v := []byte(`{"account":"acct-12345","amount":123456,"seq":42,"pad":"` + strings.Repeat("abcdefghij", 20) + `é"}`)
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			payloadKind(v)
		}
	})
	b.Run("json.Valid+utf8.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			_ = json.Valid(v) && utf8.Valid(v)
		}
	})
}

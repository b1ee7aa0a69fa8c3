package compare

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive/store"
)

// TestPlainDecimal checks appendScalar's fast path for json.Number: a
// number plainDecimal passes is written as appendPlain writes it, and
// those it refuses (leading or trailing zeros, "-0", exponents, a bare
// point, non-numbers) take the parsing path.
func TestPlainDecimal(t *testing.T) {
	cases := map[string]bool{
		"0": true, "-0": false, "1": true, "-1": true, "10": true, "100": true,
		"0.5": true, "-0.5": true, "0.50": false, "1.0": false, "1.": false,
		".5": false, "01": false, "-01.5": false, "1e3": false, "1E3": false,
		"12.34": true, "-1234567.89": true, "": false, "-": false, "+1": false,
		"0.05": true, "00": false, "1.2.3": false, "1a": false, "1.a": false,
		strings.Repeat("9", 64): true, strings.Repeat("9", 65): false,
	}
	for s, want := range cases {
		if got := plainDecimal(s); got != want {
			t.Errorf("plainDecimal(%q) = %v, want %v", s, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "0123456789.-e"
	for range 10_000 {
		n := 1 + rng.IntN(8)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		if store.IsJSONNumber(s) {
			// The fast path writes what the parsing path writes.
			d, ok := parseDecimal(s)
			got, gok := appendScalar(nil, json.Number(s))
			if want := "n" + string(d.appendPlain(nil)) + ";"; ok && d.exp >= -1000 && d.exp <= 1000 && (!gok || string(got) != want) {
				t.Fatalf("appendScalar(%q) = %q, %v; want %q", s, got, gok, want)
			}
		}
		if !plainDecimal(s) {
			continue
		}
		d, ok := parseDecimal(s)
		if !ok {
			t.Fatalf("plainDecimal(%q) but parseDecimal fails", s)
		}
		if got, want := string(d.appendPlain(nil)), s; got != want {
			t.Fatalf("plainDecimal(%q) but appendPlain writes %q", s, got)
		}
		fast, _ := appendScalar(nil, json.Number(s))
		if string(fast) != "n"+s+";" {
			t.Fatalf("appendScalar(%q) = %q", s, fast)
		}
	}
}

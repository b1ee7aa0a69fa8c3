package compare

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBucketer checks the fast bucket search against bucketOf on random
// bounds and keys from a small alphabet (zero bytes, bytes above 0x7f),
// with long common prefixes, keys shorter and longer than the prefix,
// bounds that share their 8 bytes after it, and every bound as a key.
func TestBucketer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 'b', 'z', 0x7f, 0x80, 0xff}
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 2000 {
		prefix := word(r.IntN(12))
		mid := word(r.IntN(10)) // shared by some bounds past the prefix
		n := r.IntN(40)
		var bounds []string
		for range n {
			switch r.IntN(3) {
			case 0:
				bounds = append(bounds, prefix+word(r.IntN(14)))
			case 1:
				bounds = append(bounds, prefix+mid+word(r.IntN(4)))
			default:
				bounds = append(bounds, word(r.IntN(16)))
			}
		}
		slices.Sort(bounds)
		bounds = slices.Compact(bounds)
		b := newBucketer(bounds)
		keys := slices.Clone(bounds)
		for range 50 {
			keys = append(keys, prefix+word(r.IntN(14)), prefix+mid+word(r.IntN(4)), word(r.IntN(16)), prefix[:r.IntN(len(prefix)+1)])
		}
		for _, k := range keys {
			if got, want := b.of(k), bucketOf(bounds, k); got != want {
				t.Fatalf("round %d: bounds %q: key %q: bucket %d, want %d", round, bounds, k, got, want)
			}
		}
	}
}

// TestBucketerBenchKeys checks the bucketer on keys shaped like the
// benchmark's (a shared head, digits), where every bound shares its first
// bytes and many keys fall on a bound.
func TestBucketerBenchKeys(t *testing.T) {
	var bounds, keys []string
	for i := range 100_000 {
		k := "key-" + string(rune('0'+i/10000%10)) + string(rune('0'+i/1000%10)) + string(rune('0'+i/100%10)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
		keys = append(keys, k)
		if i%97 == 13 {
			bounds = append(bounds, k)
		}
	}
	keys = append(keys, "", "key-", "key-999999", "kez", "a")
	b := newBucketer(bounds)
	for _, k := range keys {
		if got, want := b.of(k), bucketOf(bounds, k); got != want {
			t.Fatalf("key %q: bucket %d, want %d", k, got, want)
		}
	}
}

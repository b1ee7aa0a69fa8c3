package ledger

import (
	"fmt"
	"testing"
)

// The filter never forgets a key it was given, across layer growth, and
// says "maybe" for few absent keys.
func TestIDFilter(t *testing.T) {
	t.Parallel()
	var f idFilter
	const n = 600_000 // crosses the first two layers
	for i := 0; i < n; i++ {
		f.add(idHash(fmt.Sprint("id-", i)))
	}
	if len(f.layers) < 2 {
		t.Fatalf("%d layers after %d keys, want growth", len(f.layers), n)
	}
	for i := 0; i < n; i++ {
		if !f.mayContain(idHash(fmt.Sprint("id-", i))) {
			t.Fatalf("key %d added but not found", i)
		}
	}
	fp := 0
	const probes = 200_000
	for i := 0; i < probes; i++ {
		if f.mayContain(idHash(fmt.Sprint("absent-", i))) {
			fp++
		}
	}
	// At 24 bits a key a full layer answers "maybe" for about 0.01% of
	// absent keys; 0.1% would be a filter sized or hashed wrong.
	if rate := float64(fp) / probes; rate > 0.001 {
		t.Fatalf("false positive rate %.5f, want under 0.001", rate)
	} else {
		t.Logf("false positive rate %.4f over %d layers", rate, len(f.layers))
	}
}

// A filter of few keys holds them exactly, in a few bytes a key: no
// "maybe" for an absent key, and no Bloom layer (768 KiB) until
// idExactMax keys.
func TestIDFilterSmall(t *testing.T) {
	t.Parallel()
	var f idFilter
	f.add(idHash("only"))
	if !f.mayContain(idHash("only")) {
		t.Fatal("key added but not found")
	}
	if n := 8 * cap(f.exact.slots); n > 64 || len(f.layers) != 0 {
		t.Fatalf("a filter of one key takes %d bytes and %d layers, want at most 64 and none", n, len(f.layers))
	}
	for i := 1; i < idExactMax; i++ {
		f.add(idHash(fmt.Sprint("id-", i)))
	}
	if len(f.layers) != 0 {
		t.Fatalf("%d layers at %d keys, want the exact set", len(f.layers), idExactMax)
	}
	if n := 8 * cap(f.exact.slots); n > 256<<10 {
		t.Fatalf("the exact set of %d keys takes %d bytes, want at most 256 KiB", idExactMax, n)
	}
	for i := 0; i < 100_000; i++ {
		if f.mayContain(idHash(fmt.Sprint("absent-", i))) {
			t.Fatalf("absent key %d is \"maybe\" in the exact set", i)
		}
	}
	// The key 0 (a filter key, not an id hash) has a flag of its own.
	var z exactSet
	if z.has(0) {
		t.Fatal("empty set holds 0")
	}
	z.add(0)
	if !z.has(0) || z.n != 1 {
		t.Fatal("0 added but not found")
	}
	// Past idExactMax the keys go into the first layer, and stay found.
	f.add(idHash("one more"))
	if len(f.layers) != 1 || f.exact.slots != nil {
		t.Fatalf("%d layers after %d keys, want the first", len(f.layers), idExactMax+1)
	}
	for i := 1; i < idExactMax; i++ {
		if !f.mayContain(idHash(fmt.Sprint("id-", i))) {
			t.Fatalf("key %d lost moving to the first layer", i)
		}
	}
	if !f.mayContain(idHash("only")) || !f.mayContain(idHash("one more")) {
		t.Fatal("keys lost moving to the first layer")
	}
}

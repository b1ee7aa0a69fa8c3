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

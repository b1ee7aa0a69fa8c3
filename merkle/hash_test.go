package merkle

import (
	"bytes"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
)

// TestLeafHashMatchesRFC6962 checks LeafHash against the library's hasher
// on both sides of the size up to which it hashes on the stack.
func TestLeafHashMatchesRFC6962(t *testing.T) {
	for _, n := range []int{0, 1, 31, 400, leafHashStack - 1, leafHashStack, leafHashStack + 1, 3 * leafHashStack} {
		leaf := bytes.Repeat([]byte{byte(n), 0xa5}, n)[:n]
		want := rfc6962.DefaultHasher.HashLeaf(leaf)
		if got := LeafHash(leaf); !bytes.Equal(got[:], want) {
			t.Errorf("%d bytes: LeafHash %x, rfc6962 %x", n, got, want)
		}
	}
}

func TestLeafHashAllocs(t *testing.T) {
	leaf := make([]byte, 400)
	if n := testing.AllocsPerRun(100, func() { LeafHash(leaf) }); n != 0 {
		t.Errorf("%v allocations per LeafHash of 400 bytes", n)
	}
}

package plural

import (
	"fmt"
	"math"
	"testing"
)

func TestN(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{N(0, "key", "keys"), "0 keys"},
		{N(1, "key", "keys"), "1 key"},
		{N(2, "key", "keys"), "2 keys"},
		{N(uint64(1), "entry", "entries"), "1 entry"},
		{N(uint64(math.MaxUint64), "entry", "entries"), "18446744073709551615 entries"},
		{N(int64(-1), "entry", "entries"), "-1 entries"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func ExampleN() {
	fmt.Println(N(1, "key", "keys") + " drifted")
	fmt.Println(N(3, "entry", "entries") + " lost")
	// Output:
	// 1 key drifted
	// 3 entries lost
}

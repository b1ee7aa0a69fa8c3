// Package plural writes counts of things for operators: "1 key", "3 keys",
// "0 entries".
package plural

import "fmt"

// Integer is any integer type a count comes in.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// N returns n followed by one when n is 1, by many otherwise:
// N(1, "key", "keys") is "1 key", N(0, "entry", "entries") "0 entries".
func N[T Integer](n T, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

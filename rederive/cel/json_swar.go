package cel

import (
	"encoding/binary"
	"unsafe"
)

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// plain8 reports whether the 8 bytes of s at i (i+8 <= len(s)) are plain
// string text: none is a quote, a backslash, a control character or a
// byte of a multi-byte UTF-8 sequence. String scans skip such runs 8
// bytes at a time, and look at the others byte by byte.
func plain8(s string, i int) bool {
	x := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
	// A byte of x below 0x20, or equal to '"' or '\\', sets its high
	// bit here (exactly: these tests have no false negatives, and a
	// false positive only sends the bytes to the byte-by-byte loop).
	lt20 := (x - 0x20*swarOnes) &^ x
	q := x ^ '"'*swarOnes
	quote := (q - swarOnes) &^ q
	b := x ^ '\\'*swarOnes
	bslash := (b - swarOnes) &^ b
	return (lt20|quote|bslash|x)&swarHighs == 0
}

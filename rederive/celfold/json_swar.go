package celfold

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
)

// special8 returns a mask of the bytes of s[i:i+8] (i+8 <= len(s)) that
// are not plain string text: a quote, a backslash, a control character
// or a byte of a multi-byte UTF-8 sequence. Its lowest set bit is exact:
// it is the high bit of the first such byte. (The tests below may flag a
// plain byte after a flagged one, never one before, and never miss.)
func special8(s string, i int) uint64 {
	x := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8)) // s[i] is the low byte
	lt20 := (x - 0x20*swarOnes) &^ x
	q := x ^ '"'*swarOnes
	b := x ^ '\\'*swarOnes
	return (lt20 | (q-swarOnes)&^q | (b-swarOnes)&^b | x) & swarHighs
}

// plainRun returns the number of plain string bytes at s[i:], counted 8
// at a time: string scans skip them and look at the next byte.
func plainRun(s string, i int) int {
	j := i
	for j+8 <= len(s) {
		if m := special8(s, j); m != 0 {
			return j - i + bits.TrailingZeros64(m)>>3
		}
		j += 8
	}
	return j - i
}

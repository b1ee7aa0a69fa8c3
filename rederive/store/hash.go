package store

import (
	"encoding/binary"
	"math/bits"
)

// HashText is PostgreSQL's hashtextextended(text, seed) for text in a
// deterministic collation, computed in Go: Bob Jenkins' lookup3 over the
// text's bytes as PostgreSQL's hash_bytes_extended runs it on a
// little-endian machine, the 64-bit result as PostgreSQL returns it
// (a bigint of the same bits). A store that sums hashes checks that its
// server agrees before relying on it.
func HashText(k []byte, seed uint64) uint64 {
	rot := bits.RotateLeft32
	a := uint32(0x9e3779b9) + uint32(len(k)) + 3923095
	b, c := a, a
	mix := func() {
		a -= c
		a ^= rot(c, 4)
		c += b
		b -= a
		b ^= rot(a, 6)
		a += c
		c -= b
		c ^= rot(b, 8)
		b += a
		a -= c
		a ^= rot(c, 16)
		c += b
		b -= a
		b ^= rot(a, 19)
		a += c
		c -= b
		c ^= rot(b, 4)
		b += a
	}
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		mix()
	}
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		mix()
		k = k[12:]
	}
	// The lowest byte of c is left for the length.
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += binary.LittleEndian.Uint32(k[4:])
		a += binary.LittleEndian.Uint32(k)
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += binary.LittleEndian.Uint32(k)
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return uint64(b)<<32 | uint64(c)
}

package store

import "math/bits"

// HashText is PostgreSQL's hashtextextended(text, seed) for text in a
// deterministic collation, computed in Go: Bob Jenkins' lookup3 over the
// text's bytes as PostgreSQL's hash_bytes_extended runs it on a
// little-endian machine, the 64-bit result as PostgreSQL returns it
// (a bigint of the same bits). A store that sums hashes checks that its
// server agrees before relying on it.
func HashText(k []byte, seed uint64) uint64 { return hashBytes(k, seed) }

// HashString is HashText of a string's bytes, without copying them.
func HashString(k string, seed uint64) uint64 { return hashBytes(k, seed) }

// le32 is the little-endian 32-bit word at the start of k.
func le32[T string | []byte](k T) uint32 {
	_ = k[3]
	return uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16 | uint32(k[3])<<24
}

func hashBytes[T string | []byte](k T, seed uint64) uint64 {
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
		a += le32(k)
		b += le32(k[4:])
		c += le32(k[8:])
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
		b += le32(k[4:])
		a += le32(k)
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
		a += le32(k)
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

// HashNumeric is PostgreSQL's hash_numeric_extended(numeric, seed) of the
// finite number written in plain decimal (digits, an optional point and
// digits; no sign: PostgreSQL hashes -x as x), computed in Go: lookup3
// over the number's base-10,000 digits (16-bit, little-endian) without
// its leading and trailing zero digits, XOR the weight of its first
// nonzero digit (its power of 10,000); seed - 1 for zero. ok is false
// when plain is not such a number.
func HashNumeric(plain []byte, seed uint64) (h uint64, ok bool) {
	intp, frac := plain, []byte(nil)
	for i, c := range plain {
		if c == '.' {
			intp, frac = plain[:i], plain[i+1:]
			break
		}
	}
	if len(intp) == 0 {
		return 0, false
	}
	var stack [64]byte
	digits := stack[:0] // 2 bytes a digit
	group := func(s []byte) (uint16, bool) {
		var d uint16
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			d = d*10 + uint16(c-'0')
		}
		return d, true
	}
	first := len(intp) % 4
	if first == 0 {
		first = 4
	}
	weight := (len(intp)+3)/4 - 1
	for i := 0; i < len(intp); {
		n := 4
		if i == 0 {
			n = first
		}
		d, ok := group(intp[i : i+n])
		if !ok {
			return 0, false
		}
		digits = append(digits, byte(d), byte(d>>8))
		i += n
	}
	for i := 0; i < len(frac); i += 4 {
		s := frac[i:min(i+4, len(frac))]
		d, ok := group(s)
		if !ok {
			return 0, false
		}
		for range 4 - len(s) {
			d *= 10
		}
		digits = append(digits, byte(d), byte(d>>8))
	}
	for len(digits) > 0 && digits[0] == 0 && digits[1] == 0 {
		digits = digits[2:]
		weight--
	}
	if len(digits) == 0 {
		return seed - 1, true
	}
	for digits[len(digits)-2] == 0 && digits[len(digits)-1] == 0 {
		digits = digits[:len(digits)-2]
	}
	return hashBytes(digits, seed) ^ uint64(int64(weight)), true
}

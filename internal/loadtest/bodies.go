package loadtest

import (
	"fmt"
	"math/rand/v2"
)

// Bodies makes the request bodies of a comparison cheaply, so that the
// load generator spends its CPU on HTTP rather than on making events:
// event n's payload is one of a pool of prebuilt JSON payloads (the shape
// EventGen makes) with n stamped into its padding, and its id a UUID
// (version 4) formatted from a bijective mix of n. Payloads and ids are
// unique across n (a server that deduplicates by content or by id stores
// every one), random-looking, and differ between two Bodies of different
// salts. Safe for concurrent use: Bodies holds no mutable state.
type Bodies struct {
	pool    [][]byte
	stampAt []int // offset of the 16 stamped characters in pool[i]
	salt    uint64
}

// StampLen is the characters of a payload's padding that carry n.
const StampLen = 16

// MinStampedPayload is the least payload size Bodies accepts: the JSON
// fields, with room for the stamp in the padding.
const MinStampedPayload = 64

// NewBodies prebuilds pool payloads of size bytes (at least
// MinStampedPayload) from seed; salt makes the events of one run (or round)
// differ from another's.
func NewBodies(seed, salt uint64, size, pool int) (*Bodies, error) {
	if size < MinStampedPayload {
		return nil, fmt.Errorf("loadtest: payloads of %d bytes: want at least %d", size, MinStampedPayload)
	}
	g := NewEventGen(seed, size, false)
	b := &Bodies{pool: make([][]byte, pool), stampAt: make([]int, pool), salt: salt}
	for i := range b.pool {
		p, _ := g.Payload()
		at := indexPad(p)
		if at < 0 || at+StampLen > len(p)-2 {
			return nil, fmt.Errorf("loadtest: payload %q has no room for a stamp", p)
		}
		b.pool[i], b.stampAt[i] = p, at
	}
	return b, nil
}

// NewSaltedBodies is NewBodies with a random salt.
func NewSaltedBodies(seed uint64, size, pool int) (*Bodies, error) {
	return NewBodies(seed, rand.Uint64(), size, pool)
}

func indexPad(p []byte) int {
	const key = `"pad":"`
	for i := 0; i+len(key) <= len(p); i++ {
		if string(p[i:i+len(key)]) == key {
			return i + len(key)
		}
	}
	return -1
}

// AppendPayload appends event n's payload to dst.
func (b *Bodies) AppendPayload(dst []byte, n uint64) []byte {
	i := int(n % uint64(len(b.pool)))
	start := len(dst)
	dst = append(dst, b.pool[i]...)
	putHex(dst[start+b.stampAt[i]:start+b.stampAt[i]+StampLen], mix64(mix64(n)^b.salt))
	return dst
}

// AppendID appends event n's 36-character id to dst.
func (b *Bodies) AppendID(dst []byte, n uint64) []byte {
	// a carries n one to one (mix64 is a bijection): 32+16+12+4 of its
	// bits go into the UUID, so distinct n give distinct ids. The salt is
	// mixed in between two rounds of mixing, so that two salts' ids differ
	// too (n^s1 == m^s2 is easy; mix64(n)^s1 == mix64(m)^s2 is not).
	a := mix64(mix64(n^0x5bd1e995) ^ b.salt)
	r := mix64(a)
	var u [36]byte
	putHex(u[0:8], a>>32)
	u[8] = '-'
	putHex(u[9:13], a>>16)
	u[13] = '-'
	u[14] = '4'
	putHex(u[15:18], a>>4)
	u[18] = '-'
	putHex(u[19:23], 0x8000|(r>>48)&0x3ff0|a&0xf)
	u[23] = '-'
	putHex(u[24:36], r)
	return append(dst, u[:]...)
}

// AppendEvent appends event n as one NDJSON line, with its newline:
// {"id":"<id>","payload":<payload>}.
func (b *Bodies) AppendEvent(dst []byte, n uint64) []byte {
	dst = append(dst, `{"id":"`...)
	dst = b.AppendID(dst, n)
	dst = append(dst, `","payload":`...)
	dst = b.AppendPayload(dst, n)
	return append(dst, "}\n"...)
}

// AppendNDJSON appends events first .. first+count-1, one per line.
func (b *Bodies) AppendNDJSON(dst []byte, first uint64, count int) []byte {
	for i := range count {
		dst = b.AppendEvent(dst, first+uint64(i))
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// putHex writes the low 4*len(dst) bits of v as lower-case hex.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// mix64 is splitmix64's finalizer: a bijection on uint64.
func mix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

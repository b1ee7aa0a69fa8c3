package loadtest

import (
	"fmt"
	"math/rand/v2"
)

// Alnum is the alphabet of generated padding.
const Alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// EventGen makes events: 36-character UUID (version 4) ids and payloads of
// a fixed size. Two generators with the same seed make the same events. An
// EventGen is not safe for concurrent use: give each producer its own.
type EventGen struct {
	rng    *rand.Rand
	size   int
	random bool
}

// NewEventGen returns a generator of payloads of size bytes: random bytes
// if random, else a JSON object padded to size (at least its fields' length,
// about 40 bytes).
func NewEventGen(seed uint64, size int, random bool) *EventGen {
	return &EventGen{rng: rand.New(rand.NewPCG(seed, seed*0x9E3779B97F4A7C15+1)), size: size, random: random}
}

// ID returns a random UUID in its 36-character text form.
func (g *EventGen) ID() string {
	a, b := g.rng.Uint64(), g.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", uint32(a>>32), uint16(a>>16), uint16(a)&0xfff, uint16(b>>48)&0x3fff|0x8000, b&0xffffffffffff)
}

// Payload returns a payload and whether it is JSON.
func (g *EventGen) Payload() ([]byte, bool) {
	if g.random {
		b := make([]byte, g.size)
		for i := range b {
			b[i] = byte(g.rng.Uint32())
		}
		return b, false
	}
	head := fmt.Sprintf(`{"account":"acct-%06d","amount":%d,"pad":"`, g.rng.IntN(1_000_000), g.rng.IntN(100_000))
	pad := max(0, g.size-len(head)-2)
	b := make([]byte, 0, g.size)
	b = append(b, head...)
	for range pad {
		b = append(b, Alnum[g.rng.IntN(len(Alnum))])
	}
	return append(b, '"', '}'), true
}

package ledger

import (
	"math/bits"
)

// idFilter remembers which id-index keys a log holds, so the append path
// can skip the storage lookup for ids it has never seen (nearly all of them).
// It may answer "maybe" for an absent key, never "no" for a present one.
// It costs memory in proportion to the log: a log of few ids keeps them in
// an exact set (small, an open-addressing table of the mixed keys, which
// never answers "maybe" for an absent key), and only past idExactMax keys
// does the filter turn into Bloom layers, the first of idFilterFirst keys
// (768 KiB) holding the exact set's keys. (A first Bloom layer for every
// log made a one-event log cost 768 KiB, 7.7 GB for 10,000 logs.) The
// layers grow, each four times the capacity of the last, so the false
// positive rate stays bounded however long the log gets while a lookup
// tests few layers (a 10M-entry log has four).
//
// Each layer is a blocked Bloom filter: all of a key's bits fall in one
// 64-byte block, so a test costs one cache miss per layer. A "maybe" costs
// far more: a storage lookup that seeks every index chunk of the log (150
// for 10M entries), so the layers spend 24 bits a key to keep them rare
// (docs/perf/decisions.md has the rates).
// Block counts are not rounded to powers of two: a key's block is its hash
// scaled to the count.
//
// A key is an idHash, of which the filter takes the top 40 bits (what a
// packed id index bucket keeps, so the open can rebuild the filter from the
// index: see indexpack.go), mixed into 64 uniformly random bits.
type idFilter struct {
	exact  exactSet // until the first layer: every key, exactly
	layers []*blockedBloom
	count  uint64 // keys in the newest layer
	cap    uint64 // capacity of the newest layer
	// unknown marks the id index buckets (top byte of an idHash) the open
	// could not read: every id of one is "maybe", so that its lookup
	// reports the damage instead of an append taking the id as new.
	unknown *[256]bool
}

// addUnknown makes every key of bucket (the top byte of an idHash) "maybe".
func (f *idFilter) addUnknown(bucket byte) {
	if f.unknown == nil {
		f.unknown = new([256]bool)
	}
	f.unknown[bucket] = true
}

const (
	// idExactMax is the most keys the exact set holds: its table is then
	// at most idExactMax*4/3 rounded up to a power of two slots of 8
	// bytes (256 KiB), a third of the first layer.
	idExactMax       = 3 << 13
	idFilterFirst    = 1 << 18
	idFilterGrowth   = 4
	bloomBitsPerKey  = 24 // 3 bytes a key, 7 bits set: about 0.02% "maybe" for absent keys over three layers
	bloomBitsPerWord = 64
	bloomBlockWords  = 8 // 512-bit blocks
)

type blockedBloom struct {
	words  []uint64
	blocks uint64
}

func newBlockedBloom(keys uint64) *blockedBloom {
	blocks := max(1, (keys*bloomBitsPerKey+bloomBlockWords*bloomBitsPerWord-1)/(bloomBlockWords*bloomBitsPerWord))
	return &blockedBloom{words: make([]uint64, blocks*bloomBlockWords), blocks: blocks}
}

// bloomProbes is how many bits a key sets: 7 probes of 9 bits of its
// hash (3 choose the word of the block, 6 the bit).
const bloomProbes = 7

// block returns the first word of the key's block.
func (b *blockedBloom) block(h uint64) int {
	hi, _ := bits.Mul64(bits.RotateLeft64(h, 32)*0x9E3779B97F4A7C15, b.blocks)
	return int(hi) * bloomBlockWords
}

func (b *blockedBloom) add(h uint64) {
	words := b.words[b.block(h):][:bloomBlockWords]
	for i := 0; i < bloomProbes; i++ {
		v := h >> (9 * i)
		words[v>>6&7] |= 1 << (v & 63)
	}
}

func (b *blockedBloom) test(h uint64) bool {
	words := b.words[b.block(h):][:bloomBlockWords]
	for i := 0; i < bloomProbes; i++ {
		v := h >> (9 * i)
		if words[v>>6&7]&(1<<(v&63)) == 0 {
			return false
		}
	}
	return true
}

// filterKey mixes the top 40 bits of an idHash (splitmix64's finalizer).
func filterKey(h uint64) uint64 {
	z := h >> 24
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (f *idFilter) add(h uint64) {
	key := filterKey(h)
	if len(f.layers) == 0 {
		if f.exact.n < idExactMax {
			f.exact.add(key)
			return
		}
		// The exact set is full: its keys go to the first layer.
		f.layers = append(f.layers, newBlockedBloom(idFilterFirst))
		f.cap, f.count = idFilterFirst, 0
		f.exact.each(func(k uint64) {
			f.layers[0].add(k)
			f.count++
		})
		f.exact = exactSet{}
	}
	if f.count >= f.cap {
		c := f.cap * idFilterGrowth
		f.layers = append(f.layers, newBlockedBloom(c))
		f.cap, f.count = c, 0
	}
	f.layers[len(f.layers)-1].add(key)
	f.count++
}

// testAndAdd reports whether the filter may hold h, then adds it: for a
// new key the test has just brought the newest layer's block into the
// cache, where the add finds it.
func (f *idFilter) testAndAdd(h uint64) bool {
	maybe := f.mayContain(h)
	f.add(h)
	return maybe
}

func (f *idFilter) mayContain(h uint64) bool {
	if f.unknown != nil && f.unknown[h>>56] {
		return true
	}
	key := filterKey(h)
	if len(f.layers) == 0 {
		return f.exact.has(key)
	}
	for _, l := range f.layers {
		if l.test(key) {
			return true
		}
	}
	return false
}

// exactSet is a set of filter keys: open addressing with linear probing
// over a power-of-two table at most three quarters full, which starts at
// exactMinSlots and doubles. A slot of 0 is empty; the key 0 (one in 2^64)
// is the zero flag.
type exactSet struct {
	slots []uint64
	n     int // keys held, the zero key included
	zero  bool
}

const exactMinSlots = 8

// slot returns the first slot of key's probe sequence: its top bits (a
// filter key is uniformly random).
func (s *exactSet) slot(key uint64) uint64 {
	return key >> (64 - bits.TrailingZeros(uint(len(s.slots))))
}

func (s *exactSet) add(key uint64) {
	if key == 0 {
		if !s.zero {
			s.zero = true
			s.n++
		}
		return
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	i := s.slot(key)
	for ; s.slots[i] != 0; i = (i + 1) & mask {
		if s.slots[i] == key {
			return
		}
	}
	s.slots[i] = key
	s.n++
}

func (s *exactSet) has(key uint64) bool {
	if key == 0 {
		return s.zero
	}
	if len(s.slots) == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	for i := s.slot(key); s.slots[i] != 0; i = (i + 1) & mask {
		if s.slots[i] == key {
			return true
		}
	}
	return false
}

// grow doubles the table (or makes the first one) and files every key
// again.
func (s *exactSet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(exactMinSlots, 2*len(old)))
	mask := uint64(len(s.slots) - 1)
	for _, k := range old {
		if k == 0 {
			continue
		}
		i := s.slot(k)
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = k
	}
}

// each calls fn with every key of the set.
func (s *exactSet) each(fn func(uint64)) {
	if s.zero {
		fn(0)
	}
	for _, k := range s.slots {
		if k != 0 {
			fn(k)
		}
	}
}

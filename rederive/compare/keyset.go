package compare

import (
	"hash/maphash"
)

// keySet is a set of keys held as 127-bit keyed hashes in one flat
// open-addressed table: a lookup or an insert costs one cache miss, the
// table holds no pointers for the garbage collector to scan, and the keys
// themselves are not kept. Two distinct keys collide with probability
// about 2^-127 (with random seeds an input cannot aim at), so for 10^9
// keys about 10^-20: such a collision would make a missing key look
// present or a key look duplicated.
type keySet struct {
	seed1, seed2 maphash.Seed
	// slots are (hash, second hash | 1); a zero second hash is empty.
	slots [][2]uint64
	n     int
}

func newKeySet(hint int) *keySet {
	size := 1024
	for size < 2*hint {
		size <<= 1
	}
	return &keySet{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([][2]uint64, size)}
}

func (s *keySet) hash(k string) [2]uint64 {
	return [2]uint64{maphash.String(s.seed1, k), maphash.String(s.seed2, k) | 1}
}

// add adds k and reports whether it was absent.
func (s *keySet) add(k string) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	if !s.insert(s.hash(k)) {
		return false
	}
	s.n++
	return true
}

func (s *keySet) insert(h [2]uint64) bool {
	mask := uint64(len(s.slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case [2]uint64{}:
			s.slots[i] = h
			return true
		case h:
			return false
		}
	}
}

func (s *keySet) grow() {
	old := s.slots
	s.slots = make([][2]uint64, 2*len(old))
	for _, h := range old {
		if h[1] != 0 {
			s.insert(h)
		}
	}
}

func (s *keySet) has(k string) bool {
	h := s.hash(k)
	mask := uint64(len(s.slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case [2]uint64{}:
			return false
		case h:
			return true
		}
	}
}

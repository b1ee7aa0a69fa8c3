package fold

import (
	"hash/maphash"
	"math/bits"
	"sync"
)

// KeyIndex is what a fold records so that the lineage of a few keys
// need not read every entry again: for each batch of entries it read
// (up to 1,024 entries of one log), a Bloom filter of the keys the
// batch's entries step, and whether one of them steps every key (an
// AllKeys entry). Lineage and Explain, given the index, skip a batch the
// fold recorded when its filter holds none of their keys and it has no
// AllKeys entry: the batch can step none of them. Their result is the
// same as without the index; only the entries read differ.
//
// It costs a hash per step while folding and about 2 KB per batch of
// 1,024 single-key entries (2 MB per million entries). A Bloom filter
// has no false negatives; its false positives (about 1 in 400 per key
// and batch) only make lineage read a batch it did not need.
//
// A batch is known by its log and its entry range: a fold that continues
// from a base reads batches from the base's size, which a lineage read
// from 0 does not meet, and reads them in full. A KeyIndex is safe for
// concurrent use and may be filled by several folds of the same logs.
type KeyIndex struct {
	seed    maphash.Seed
	mu      sync.Mutex
	batches map[batchRange]keyFilter
}

// batchRange is a batch's log and entries [from, to).
type batchRange struct {
	log      string
	from, to uint64
}

// keyFilter is a Bloom filter of a batch's keys (bits's length is a
// power of two, filterProbes bits a key), or all for a batch that may
// step any key.
type keyFilter struct {
	all  bool
	bits []uint64
}

const (
	filterBitsPerKey = 16
	filterProbes     = 4
)

// NewKeyIndex returns an empty index.
func NewKeyIndex() *KeyIndex {
	return &KeyIndex{seed: maphash.MakeSeed(), batches: map[batchRange]keyFilter{}}
}

// hash is a key's hash in x's filters.
func (x *KeyIndex) hash(k string) uint64 { return maphash.String(x.seed, k) }

// record keeps the filter of a batch whose steps' keys have hashes hs.
func (x *KeyIndex) record(log string, from, to uint64, all bool, hs []uint64) {
	f := keyFilter{all: all}
	if !all {
		n := max(64, len(hs)*filterBitsPerKey)
		n = 1 << bits.Len(uint(n-1)) // a power of two
		f.bits = make([]uint64, n/64)
		mask := uint64(n - 1)
		for _, h := range hs {
			a, b := h, h>>32|1
			for range filterProbes {
				i := a & mask
				f.bits[i/64] |= 1 << (i % 64)
				a += b
			}
		}
	}
	x.mu.Lock()
	x.batches[batchRange{log, from, to}] = f
	x.mu.Unlock()
}

// skips reports whether the batch [from, to) of log was recorded and can
// step none of the keys whose hashes are hs.
func (x *KeyIndex) skips(log string, from, to uint64, hs []uint64) bool {
	x.mu.Lock()
	f, ok := x.batches[batchRange{log, from, to}]
	x.mu.Unlock()
	if !ok || f.all {
		return false
	}
	mask := uint64(len(f.bits)*64 - 1)
	for _, h := range hs {
		a, b := h, h>>32|1
		in := true
		for range filterProbes {
			i := a & mask
			if f.bits[i/64]&(1<<(i%64)) == 0 {
				in = false
				break
			}
			a += b
		}
		if in {
			return false
		}
	}
	return true
}

// Batches returns the number of batches recorded.
func (x *KeyIndex) Batches() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.batches)
}

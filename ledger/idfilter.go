package ledger

import (
	"github.com/bits-and-blooms/bloom/v3"
)

// idFilter remembers which id-index keys a log holds, so the append path
// can skip the storage lookup for ids it has never seen (nearly all of them).
// It may answer "maybe" for an absent key, never "no" for a present one.
// It grows in layers, each four times the capacity of the last, so its
// false positive rate stays bounded however long the log gets while a lookup
// tests few layers (a 10M-entry log has four).
type idFilter struct {
	layers []*bloom.BloomFilter
	count  uint // keys in the newest layer
	cap    uint // capacity of the newest layer
}

const (
	idFilterFirst = 1 << 18
	idFilterFP    = 0.01
)

func (f *idFilter) add(key []byte) {
	if len(f.layers) == 0 || f.count >= f.cap {
		c := uint(idFilterFirst)
		if f.cap > 0 {
			c = f.cap * 4
		}
		f.layers = append(f.layers, bloom.NewWithEstimates(c, idFilterFP/2))
		f.cap, f.count = c, 0
	}
	f.layers[len(f.layers)-1].Add(key)
	f.count++
}

func (f *idFilter) mayContain(key []byte) bool {
	for _, l := range f.layers {
		if l.Test(key) {
			return true
		}
	}
	return false
}

package ledger

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTailTableMatchesModel drives a tail table and a plain model (every
// entry in a slice) through the same adds, drops at chunk boundaries and
// lookups, past several resizes and two chunks. Keys come from a small set,
// so most of them collide, and from the full range.
func TestTailTableMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tt tailTable
	var model []indexEntry
	small := make([]uint64, 300)
	for i := range small {
		small[i] = rng.Uint64()
	}
	key := func() uint64 {
		if rng.IntN(3) == 0 {
			return small[rng.IntN(len(small))]
		}
		return rng.Uint64()
	}
	check := func(h uint64) {
		t.Helper()
		var want []uint64
		for _, e := range model {
			if e.h == h {
				want = append(want, e.index)
			}
		}
		if got := tt.lookup(h, nil); !slices.Equal(got, want) {
			t.Fatalf("lookup %x: got %v, want %v", h, got, want)
		}
	}
	const n = 2*indexChunk + 5000
	for i := uint64(0); i < n; i++ {
		e := indexEntry{key(), i}
		tt.add(e)
		model = append(model, e)
		if i%997 == 0 {
			check(e.h)
			check(small[rng.IntN(len(small))])
			check(rng.Uint64())
		}
		if i+1 > indexChunk && (i+1)%indexChunk == 1000 {
			// The writer drops a chunk after the commit that completed it.
			boundary := (i + 1) / indexChunk * indexChunk
			if got, want := tt.run(boundary-indexChunk, boundary), model[:indexChunk]; !slices.Equal(got, want) {
				t.Fatalf("run below %d: %d entries, want %d", boundary, len(got), len(want))
			}
			tt.dropBelow(boundary)
			model = slices.Clone(model[indexChunk:])
			if len(tt.list) != len(model) {
				t.Fatalf("after drop: %d entries, want %d", len(tt.list), len(model))
			}
			for _, h := range small {
				check(h)
			}
		}
	}
	for _, e := range model[:100] {
		check(e.h)
	}
	if got := tt.lookup(0x1234, nil); len(got) != 0 && !slices.ContainsFunc(model, func(e indexEntry) bool { return e.h == 0x1234 }) {
		t.Fatalf("lookup of an absent key: %v", got)
	}
}

// TestByIDKeyCollision files two ids under one 64-bit key: each must keep
// its own value, and an id never filed must not be found.
func TestByIDKeyCollision(t *testing.T) {
	m := newByID[int](4)
	m.put(7, "a", 1)
	m.put(7, "b", 2)
	m.put(8, "c", 3)
	for id, want := range map[string]int{"a": 1, "b": 2} {
		if got, ok := m.get(7, id); !ok || got != want {
			t.Errorf("get(7, %q) = %d, %v; want %d", id, got, ok, want)
		}
	}
	if _, ok := m.get(7, "c"); ok {
		t.Error("an id was found under another id's key")
	}
	if _, ok := m.get(9, "a"); ok {
		t.Error("an id was found under a key never filed")
	}
}

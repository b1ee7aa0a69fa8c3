package ledger

import (
	"context"
	"slices"
	"testing"
)

// TestRawLogTileMemo checks that a pass of Check reads each level-0 tile of
// the indexed chunks once: every tile of a batch handed to fn is already
// remembered (the storage checks read it), so the scrub's own read is
// served from memory; that a remembered tile is the stored one; and that a
// tile evicted from its slot is read again, not confused with the tile
// that took the slot.
func TestRawLogTileMemo(t *testing.T) {
	dir, _ := indexBase(t, false)
	rs, err := OpenRaw(dir, WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	fresh := func(n uint64) ([]byte, []byte) {
		t.Helper()
		r, err := rs.Log("x")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		base, mid, err := r.Tile(0, n)
		if err != nil {
			t.Fatal(err)
		}
		return hashBytes(base), hashBytes(mid)
	}

	r, err := rs.Log("x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tiles := 0
	_, err = r.Check(context.Background(), func(es []ScannedEntry) error {
		for _, e := range es {
			n := e.Index / tileWidth
			if e.Index >= indexChunk || e.Index%tileWidth != 0 {
				continue
			}
			base, mid, ok := r.tiles.get(n)
			if !ok {
				t.Fatalf("tile 0/%d is not remembered when its batch reaches fn: the scrub reads it a second time", n)
			}
			again, _, err := r.Tile(0, n)
			if err != nil || &again[0] != &base[0] {
				t.Fatalf("Tile(0, %d) after the storage check: %v, or not the remembered tile", n, err)
			}
			if n%37 == 0 { // compare some with a fresh read
				wb, wm := fresh(n)
				if !slices.Equal(hashBytes(base), wb) || !slices.Equal(hashBytes(mid), wm) {
					t.Fatalf("remembered tile 0/%d differs from the stored one", n)
				}
			}
			tiles++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tiles != indexChunk/tileWidth {
		t.Fatalf("looked at %d tiles of the indexed chunk, want %d", tiles, indexChunk/tileWidth)
	}

	// Tile tileMemoSize takes tile 0's slot; tile 0 is then read again.
	r2, err := rs.Log("x")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	first, _, err := r2.Tile(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := r2.Tile(0, tileMemoSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r2.tiles.get(0); ok {
		t.Fatal("tile 0 still remembered after tile tileMemoSize took its slot")
	}
	again, _, err := r2.Tile(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] == &first[0] || !slices.Equal(hashBytes(again), hashBytes(first)) || slices.Equal(hashBytes(again), hashBytes(other)) {
		t.Fatal("tile 0 read after eviction is not a fresh read of tile 0")
	}
}

func hashBytes[H ~[32]byte](hs []H) []byte {
	out := make([]byte, 0, 32*len(hs))
	for _, h := range hs {
		out = append(out, h[:]...)
	}
	return out
}

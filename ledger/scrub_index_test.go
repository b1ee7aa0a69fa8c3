package ledger

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// indexBase builds log "x" of indexChunk+300 entries (chunk 0 ingested,
// packed or rewritten as layout 1) in a closed store and returns its
// directory and the log's id.
func indexBase(t *testing.T, layout1 bool) (dir string, id uint32) {
	t.Helper()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l := mustCreateLog(t, s, "x")
	n := indexChunk + 300
	appendUUIDs(t, l, 0, n)
	dir = testConfig(t, s).dir
	id = l.id
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if layout1 {
		toLayout1(t, dir, "x", id, uint64(n))
	}
	return dir, id
}

// scrubIndexes does what the scrub does for the index chunks of log "x":
// it rebuilds each ingested chunk's keys from a scan of its entries and
// compares them with checkIndexChunk.
func scrubIndexes(t *testing.T, dir string, chunks uint64) []IndexFinding {
	t.Helper()
	rs, err := OpenRaw(dir, WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	r, err := rs.Log("x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recorded, _, err := r.indexChunks()
	if err != nil || recorded != chunks {
		t.Fatalf("IndexChunks: %d, %v; want %d", recorded, err, chunks)
	}
	keys := newChunkKeys()
	var out []IndexFinding
	err = r.scan(context.Background(), 0, r.Size(), func(es []ScannedEntry) error {
		for _, e := range es {
			if e.Index >= recorded*indexChunk {
				return nil
			}
			pos := int(e.Index % indexChunk)
			if e.Err == nil {
				keys.setID(pos, e.idKey)
				keys.setLeaf(pos, e.LeafHash)
			}
			if pos == indexChunk-1 {
				fs, err := r.checkIndexChunk(e.Index/indexChunk, keys)
				if err != nil {
					return err
				}
				out = append(out, fs...)
				keys.reset()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// indexTarget returns the index key holding entry e's record in chunk 0
// of kind's index, the offset of a byte of that record to flip, and the
// entry of the key's first record.
func indexTarget(t *testing.T, db *pebble.DB, layout1 bool, kind byte, id uint32, e int) (key []byte, at int, first uint64) {
	t.Helper()
	h := idHash(uuidEntry(e).ID)
	if kind == kindHashIndex {
		base, _, err := hashReaderTile(db, id, uint64(e/tileWidth))
		if err != nil {
			t.Fatal(err)
		}
		h = leafHashKey(base[e%tileWidth])
	}
	if layout1 {
		key = chunkKey(kind, id, 0, h)
		v, closer, err := db.Get(key)
		if err != nil {
			t.Fatalf("layout-1 key of entry %d: %v", e, err)
		}
		defer closer.Close()
		idx, _ := decodeIndexes(v)
		return key, len(v) - 1, idx[0]
	}
	key = packedKey(kind, id, 0, byte(h>>56))
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("bucket of entry %d: %v", e, err)
	}
	defer closer.Close()
	w := fpBytes(kind)
	for at := 0; at < len(v); at += w + 2 {
		if binary.BigEndian.Uint16(v[at+w:]) == uint16(e) {
			return key, at + w - 1, uint64(binary.BigEndian.Uint16(v[w:]))
		}
	}
	t.Fatalf("bucket %x has no record of entry %d", key, e)
	return nil, 0, 0
}

func hashReaderTile(db *pebble.DB, id uint32, n uint64) ([]merkle.Hash, []merkle.Hash, error) {
	v, closer, err := db.Get(tileKey(id, 0, n))
	if err != nil {
		return nil, nil, err
	}
	defer closer.Close()
	return decodeTile(v)
}

// TestScrubIndexChunks damages the ingested chunk of each index, packed
// and in layout 1, by a flipped value byte and by a deleted key, and
// checks that the comparison names the index, the chunk, the bucket and
// the entry a lookup misses; a clean chunk, and one with an entry gone,
// compare clean.
func TestScrubIndexChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("appends an index chunk of entries")
	}
	t.Parallel()
	const e = 4242
	for _, layout1 := range []bool{false, true} {
		name, layout := "packed", "(packed)"
		if layout1 {
			name, layout = "layout1", "(layout 1)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base, id := indexBase(t, layout1)
			type edit struct {
				name  string
				do    func(t *testing.T, db *pebble.DB) (index string, entry int64, what string)
				clean bool
			}
			edits := []edit{{name: "clean", clean: true, do: func(*testing.T, *pebble.DB) (string, int64, string) { return "", 0, "" }},
				{name: "entry deleted", clean: true, do: func(t *testing.T, db *pebble.DB) (string, int64, string) {
					if err := deleteKey(entryKey(id, e))(db); err != nil {
						t.Fatal(err)
					}
					return "", 0, ""
				}}}
			for _, kind := range []byte{kindIDIndex, kindHashIndex} {
				index := map[byte]string{kindIDIndex: "id", kindHashIndex: "leaf-hash"}[kind]
				edits = append(edits, edit{name: index + " value byte", do: func(t *testing.T, db *pebble.DB) (string, int64, string) {
					key, at, _ := indexTarget(t, db, layout1, kind, id, e)
					if err := flipByte(key, at)(db); err != nil {
						t.Fatal(err)
					}
					return index, e, "value differs"
				}}, edit{name: index + " key deleted", do: func(t *testing.T, db *pebble.DB) (string, int64, string) {
					key, _, first := indexTarget(t, db, layout1, kind, id, e)
					if err := deleteKey(key)(db); err != nil {
						t.Fatal(err)
					}
					return index, int64(first), "key missing"
				}})
			}
			for _, ed := range edits {
				t.Run(ed.name, func(t *testing.T) {
					var index string
					var entry int64
					var what string
					dir := editedCopy(t, base, func(db *pebble.DB) { index, entry, what = ed.do(t, db) })
					fs := scrubIndexes(t, dir, 1)
					if ed.clean {
						if len(fs) != 0 {
							t.Fatalf("findings %+v, want none", fs)
						}
						return
					}
					if len(fs) != 1 {
						t.Fatalf("findings %+v, want one", fs)
					}
					f := fs[0]
					if f.Index != index || f.Chunk != 0 || f.Entry != entry ||
						!strings.Contains(f.Detail, index+" index chunk 0 "+layout+": 1 of ") ||
						!strings.Contains(f.Detail, "bucket 0x") || !strings.Contains(f.Detail, what) {
						t.Fatalf("finding %+v, want %s index, entry %d, %q", f, index, entry, what)
					}
				})
			}
		})
	}
}

// TestIndexChunkSort checks the check's sort against the order chunks are
// written in, with keys that collide in full and in single bytes.
func TestIndexChunkSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tmp []indexEntry
	count := make([]uint32, 1<<16)
	for _, n := range []int{0, 1, 2, 20, 300, indexChunk} {
		es := make([]indexEntry, n)
		for i := range es {
			h := rng.Uint64()
			switch i % 7 {
			case 1:
				h = 0xabcd<<48 | h&0xffff // many share the top bits
			case 3:
				h = 0x1234<<48 | h&0xff // another shared prefix
			case 2:
				h = uint64(rng.IntN(8)) << 56 // full collisions
			}
			es[i] = indexEntry{h, uint64(i)}
		}
		want := slices.Clone(es)
		sortIndexEntries(want)
		var got []indexEntry
		got, tmp = sortChunkEntries(slices.Clone(es), tmp, count)
		if !slices.Equal(got, want) {
			t.Fatalf("%d entries: order differs", n)
		}
	}
}

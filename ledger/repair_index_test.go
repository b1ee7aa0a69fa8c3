package ledger

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestRepairIndex damages the ingested chunk of both indexes (a flipped
// byte in the id index, a deleted leaf-hash bucket), packed (with the
// first 3,000 payloads pruned) and (the repair only) in layout 1, and
// checks what that costs and what RepairIndex gives back:
//   - damaged, a retry of an event the id index lost is appended again,
//     and its leaf hash is not found;
//   - a dry run reports both chunks and writes nothing;
//   - the repair rewrites both, the scrub's comparison is then clean, the
//     retry is answered as a duplicate and the leaf hash is found;
//   - with an entry of the chunk deleted as well, or a level-0 tile that
//     disagrees with an entry, the repair refuses the chunk, names the
//     entry and leaves the index as it was.
func TestRepairIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("appends an index chunk of entries")
	}
	t.Parallel()
	const e, f = 4242, 31337
	for _, layout1 := range []bool{false, true} {
		name := map[bool]string{false: "packed", true: "layout1"}[layout1]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestStore(t, WithCheckpointInterval(0))
			l := mustCreateLog(t, s, "x")
			appendUUIDs(t, l, 0, indexChunk+300)
			cfg := testConfig(t, s)
			id := l.id
			recF, err := l.Entry(f)
			if err != nil {
				t.Fatal(err)
			}
			if !layout1 {
				// Retention pruned the first payloads: their entries hold the
				// payload's hash, and the repair rebuilds their keys from it.
				if res, err := l.PrunePayloads(context.Background(), PruneOptions{Before: 3000}); err != nil || res.Pruned != 3000 {
					t.Fatalf("prune: %+v, %v", res, err)
				}
			}
			leafF := recF.LeafHash
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if layout1 {
				toLayout1(t, cfg.dir, "x", id, indexChunk+300)
			}
			damage := func(t *testing.T, extra func(*pebble.DB) error) string {
				return editedCopy(t, cfg.dir, func(db *pebble.DB) {
					key, at, _ := indexTarget(t, db, layout1, kindIDIndex, id, e)
					edits := []func(*pebble.DB) error{flipByte(key, at)}
					key, _, _ = indexTarget(t, db, layout1, kindHashIndex, id, f)
					edits = append(edits, deleteKey(key))
					if extra != nil {
						edits = append(edits, extra)
					}
					for _, ed := range edits {
						if err := ed(db); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
			want := func(t *testing.T, reps []IndexRepair, repaired bool, refused string) {
				t.Helper()
				if len(reps) != 2 || reps[0].Index != "id" || reps[1].Index != "leaf-hash" {
					t.Fatalf("repairs %+v, want one of the id index and one of the leaf-hash index", reps)
				}
				for _, r := range reps {
					if r.Chunk != 0 || r.Repaired != repaired || !strings.Contains(r.Refused, refused) || (refused == "") != (r.Refused == "") {
						t.Errorf("repair %+v, want chunk 0, repaired %v, refused %q", r, repaired, refused)
					}
				}
			}

			t.Run("damaged", func(t *testing.T) {
				if layout1 {
					t.Skip("the damage does not depend on the layout")
				}
				dir := damage(t, nil)
				if fs := scrubIndexes(t, dir, 1); len(fs) != 2 {
					t.Fatalf("findings %+v, want two", fs)
				}
				s, l := openCopy(t, cfg, dir)
				res, err := l.Append(context.Background(), []Entry{uuidEntry(e)})
				if err != nil {
					t.Fatal(err)
				}
				if res.Entries[0].Duplicate {
					t.Fatalf("retry of entry %d found with its id index damaged: the damage did not take", e)
				}
				if _, err := l.IndexByLeafHash(leafF); err == nil {
					t.Fatalf("leaf hash of entry %d found with its bucket deleted", f)
				}
				s.Close()
			})
			t.Run("repaired", func(t *testing.T) {
				dir := damage(t, nil)
				want(t, repairCopy(t, cfg, dir, true), false, "")
				if fs := scrubIndexes(t, dir, 1); len(fs) != 2 {
					t.Fatalf("after a dry run: findings %+v, want the two still there", fs)
				}
				want(t, repairCopy(t, cfg, dir, false), true, "")
				if fs := scrubIndexes(t, dir, 1); len(fs) != 0 {
					t.Fatalf("after the repair: findings %+v, want none", fs)
				}
				if reps := repairCopy(t, cfg, dir, false); len(reps) != 0 {
					t.Fatalf("a second repair: %+v, want nothing to do", reps)
				}
				s, l := openCopy(t, cfg, dir)
				res, err := l.Append(context.Background(), []Entry{uuidEntry(e)})
				if err != nil {
					t.Fatal(err)
				}
				if a := res.Entries[0]; !a.Duplicate || a.Index != e {
					t.Errorf("retry of entry %d after the repair: %+v, want the duplicate at %d", e, a, e)
				}
				if i, err := l.IndexByLeafHash(leafF); err != nil || i != f {
					t.Errorf("leaf hash of entry %d after the repair: %d, %v", f, i, err)
				}
				s.Close()
			})
			// An entry gone, or a level-0 tile that disagrees with an entry:
			// the chunk's keys cannot be rebuilt from what is stored.
			for _, c := range []struct {
				name, refused string
				edit          func(*pebble.DB) error
			}{
				{"entry deleted too", "entry 777", deleteKey(entryKey(id, 777))},
				{"tile damaged too", "entry 777 does not hash to the leaf", flipByte(tileKey(id, 0, 777/tileWidth), 32*(777%tileWidth)+1)},
			} {
				t.Run(c.name, func(t *testing.T) {
					if layout1 {
						t.Skip("the refusal does not depend on the layout")
					}
					dir := damage(t, c.edit)
					want(t, repairCopy(t, cfg, dir, false), false, c.refused)
					if fs := scrubIndexes(t, dir, 1); len(fs) != 2 {
						t.Fatalf("after a refused repair: findings %+v, want the two still there", fs)
					}
				})
			}
		})
	}
}

// TestRepairIndexLaterChunk damages index chunks past the first of a log
// of three ingested chunks (a flipped byte in a chunk 1 id bucket, a
// deleted chunk 2 leaf-hash bucket) and checks that the scrub's comparison
// names just those chunks, that a dry run of RepairIndex reports them and
// writes nothing, and that the repair rewrites them: the comparison is then
// clean, a retry of the event whose id record was damaged is answered as a
// duplicate and the leaf hash of an entry of the deleted bucket is found.
func TestRepairIndexLaterChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("appends three index chunks of entries")
	}
	t.Parallel()
	const (
		n      = 3*indexChunk + 300
		e1, e2 = 1*indexChunk + 4242, 2*indexChunk + 31337
	)
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l := mustCreateLog(t, s, "x")
	appendUUIDs(t, l, 0, n)
	cfg := testConfig(t, s)
	id := l.id
	rec2, err := l.Entry(e2)
	if err != nil {
		t.Fatal(err)
	}
	leaf2 := rec2.LeafHash
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The buckets damaged: that of e1's id in chunk 1 of the id index, and
	// that of e2's leaf hash in chunk 2 of the leaf-hash index.
	idKey := packedKey(kindIDIndex, id, 1, byte(idHash(uuidEntry(e1).ID)>>56))
	hashKey := packedKey(kindHashIndex, id, 2, byte(leafHashKey(leaf2)>>56))
	// records returns the entries bucket key's value holds, and the offset
	// of the last fingerprint byte of entry e's record (-1 if none).
	records := func(t *testing.T, db *pebble.DB, key []byte, e int) (entries []int64, at int) {
		t.Helper()
		v, closer, err := db.Get(key)
		if err != nil {
			t.Fatalf("bucket %x: %v", key, err)
		}
		defer closer.Close()
		kind, c := key[0], int64(binary.BigEndian.Uint32(key[5:]))
		w := fpBytes(kind)
		at = -1
		for i := 0; i+w+2 <= len(v); i += w + 2 {
			pos := int64(binary.BigEndian.Uint16(v[i+w:]))
			entries = append(entries, c*indexChunk+pos)
			if c*indexChunk+pos == int64(e) {
				at = i + w - 1
			}
		}
		if at < 0 {
			t.Fatalf("bucket %x holds %v, no record of entry %d", key, entries, e)
		}
		return entries, at
	}
	var hashEntries []int64 // the entries of the deleted bucket
	damage := func(t *testing.T) string {
		return editedCopy(t, cfg.dir, func(db *pebble.DB) {
			_, at := records(t, db, idKey, e1)
			hashEntries, _ = records(t, db, hashKey, e2)
			for _, ed := range []func(*pebble.DB) error{flipByte(idKey, at), deleteKey(hashKey)} {
				if err := ed(db); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	wantRepairs := func(t *testing.T, reps []IndexRepair, repaired bool) {
		t.Helper()
		if len(reps) != 2 || reps[0].Index != "id" || reps[0].Chunk != 1 || reps[1].Index != "leaf-hash" || reps[1].Chunk != 2 {
			t.Fatalf("repairs %+v, want chunk 1 of the id index and chunk 2 of the leaf-hash index", reps)
		}
		for _, r := range reps {
			if r.Repaired != repaired || r.Refused != "" {
				t.Errorf("repair %+v, want repaired %v, none refused", r, repaired)
			}
		}
	}

	t.Run("damaged", func(t *testing.T) {
		dir := damage(t)
		fs := scrubIndexes(t, dir, 3)
		if len(fs) != 2 {
			t.Fatalf("findings %+v, want two", fs)
		}
		if f := fs[0]; f.Index != "id" || f.Chunk != 1 || f.Entry != e1 || !strings.Contains(f.Detail, "value differs") {
			t.Errorf("finding %+v, want chunk 1 of the id index, entry %d's value differs", f, e1)
		}
		if f := fs[1]; f.Index != "leaf-hash" || f.Chunk != 2 || !slices.Contains(hashEntries, f.Entry) || !strings.Contains(f.Detail, "key missing") {
			t.Errorf("finding %+v, want chunk 2 of the leaf-hash index, a key missing with an entry of %v", f, hashEntries)
		}
		s, l := openCopy(t, cfg, dir)
		res, err := l.Append(context.Background(), []Entry{uuidEntry(e1)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Entries[0].Duplicate {
			t.Fatalf("retry of entry %d found with its id record damaged: the damage did not take", e1)
		}
		if _, err := l.IndexByLeafHash(leaf2); err == nil {
			t.Fatalf("leaf hash of entry %d found with its bucket deleted", e2)
		}
		s.Close()
	})
	t.Run("repaired", func(t *testing.T) {
		dir := damage(t)
		before := scrubIndexes(t, dir, 3)
		wantRepairs(t, repairCopy(t, cfg, dir, true), false)
		if after := scrubIndexes(t, dir, 3); len(after) != 2 || !slices.Equal(after, before) {
			t.Fatalf("after a dry run: findings %+v, want %+v still there", after, before)
		}
		wantRepairs(t, repairCopy(t, cfg, dir, false), true)
		if fs := scrubIndexes(t, dir, 3); len(fs) != 0 {
			t.Fatalf("after the repair: findings %+v, want none", fs)
		}
		s, l := openCopy(t, cfg, dir)
		res, err := l.Append(context.Background(), []Entry{uuidEntry(e1)})
		if err != nil {
			t.Fatal(err)
		}
		if a := res.Entries[0]; !a.Duplicate || a.Index != e1 {
			t.Errorf("retry of entry %d after the repair: %+v, want the duplicate at %d", e1, a, e1)
		}
		if got := l.Size(); got != n {
			t.Errorf("log size after the retry: %d, want %d", got, n)
		}
		for _, e := range []int64{e2, hashEntries[0], hashEntries[len(hashEntries)-1]} {
			want := leaf2
			if e != e2 {
				r, err := l.Entry(uint64(e))
				if err != nil {
					t.Fatal(err)
				}
				want = r.LeafHash
			}
			if i, err := l.IndexByLeafHash(want); err != nil || i != uint64(e) {
				t.Errorf("leaf hash of entry %d after the repair: %d, %v", e, i, err)
			}
		}
		s.Close()
	})
}

// openCopy opens the store of cfg copied to dir, and its log "x".
func openCopy(t *testing.T, cfg testStoreConfig, dir string) (*Store, *Log) {
	t.Helper()
	cfg.dir = dir
	s := openTestStore(t, cfg)
	return s, mustLog(t, s, "x")
}

// repairCopy runs RepairIndex on log "x" of the store in dir and closes it.
func repairCopy(t *testing.T, cfg testStoreConfig, dir string, dry bool) []IndexRepair {
	t.Helper()
	s, l := openCopy(t, cfg, dir)
	reps, err := l.RepairIndex(context.Background(), dry, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return reps
}

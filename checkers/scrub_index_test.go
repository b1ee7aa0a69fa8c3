package checkers_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// The index test store: 70,000 entries, past the 65,536-entry index chunk,
// so chunk 0 of both indexes is ingested (packed) and the rest is in
// memory only.
const indexTotal = 70000

var (
	indexOnce sync.Once
	indexDir  string
	indexKey  testKey
)

func indexStore(t *testing.T) (string, testKey) {
	t.Helper()
	indexOnce.Do(func() {
		indexKey = newKey(t)
		dir, err := makeTempDir()
		if err != nil {
			t.Fatal(err)
		}
		st := indexKey.open(t, dir, ledger.WithCheckpointInterval(0))
		fillLog(t, st, "pay", indexTotal, 10000, 16)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		indexDir = dir
	})
	if indexDir == "" {
		t.Fatal("test store not built")
	}
	return copyDir(t, indexDir), indexKey
}

// packedIndexKey is the key of one bucket of a packed index chunk.
func packedIndexKey(kind byte, id uint32, chunk uint32, bucket byte) []byte {
	k := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{kind}, id), chunk)
	return append(k, bucket)
}

// idBucket returns the id index bucket of entry i's id and the offset of
// its record in the bucket's value, and the entry of the bucket's first
// record.
func idBucket(t *testing.T, db *pebble.DB, id uint32, i int) (key []byte, at int, first uint64) {
	t.Helper()
	h := sha256.Sum256([]byte(testEntry(i, 16).ID))
	return findRecord(t, db, packedIndexKey('i', id, 0, h[0]), 4, i)
}

// leafBucket is idBucket for the leaf-hash index, given entry i's leaf.
func leafBucket(t *testing.T, db *pebble.DB, id uint32, i int) (key []byte, at int, first uint64) {
	t.Helper()
	v, closer, err := db.Get(tileKey(id, 0, uint64(i/256)))
	if err != nil {
		t.Fatal(err)
	}
	b := v[(i%256)*32]
	closer.Close()
	return findRecord(t, db, packedIndexKey('h', id, 0, b), 2, i)
}

func findRecord(t *testing.T, db *pebble.DB, key []byte, fp, i int) ([]byte, int, uint64) {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatalf("bucket %x: %v", key, err)
	}
	defer closer.Close()
	first := uint64(binary.BigEndian.Uint16(v[fp:]))
	for at := 0; at < len(v); at += fp + 2 {
		if int(binary.BigEndian.Uint16(v[at+fp:])) == i {
			return key, at, first
		}
	}
	t.Fatalf("bucket %x holds no record of entry %d", key, i)
	return nil, 0, 0
}

// TestScrubIndexChunk damages one bucket of the ingested index chunk per
// case and checks that the scrub reports exactly it, and that damage to
// entries in the chunk is not also reported as index damage.
func TestScrubIndexChunk(t *testing.T) {
	t.Parallel()
	const e = 4242
	cases := []struct {
		name   string
		edit   func(t *testing.T, db *pebble.DB, id uint32) (want []string)
		detail string
	}{
		{"clean", func(*testing.T, *pebble.DB, uint32) []string { return nil }, ""},
		{"id fingerprint byte", func(t *testing.T, db *pebble.DB, id uint32) []string {
			key, at, _ := idBucket(t, db, id, e)
			flip(t, db, key, func(int) int { return at + 1 })
			return []string{fmt.Sprintf("pay index_mismatch index=%d", e)}
		}, "id index chunk 0 (packed): 1 of 256 keys differ"},
		{"id key deleted", func(t *testing.T, db *pebble.DB, id uint32) []string {
			key, _, first := idBucket(t, db, id, e)
			if err := db.Delete(key, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("pay index_mismatch index=%d", first)}
		}, "key missing"},
		{"leaf-hash position byte", func(t *testing.T, db *pebble.DB, id uint32) []string {
			key, at, _ := leafBucket(t, db, id, e)
			flip(t, db, key, func(int) int { return at + 3 })
			return []string{fmt.Sprintf("pay index_mismatch index=%d", e)}
		}, "leaf-hash index chunk 0 (packed): 1 of 256 keys differ"},
		{"leaf-hash key deleted", func(t *testing.T, db *pebble.DB, id uint32) []string {
			key, _, first := leafBucket(t, db, id, e)
			if err := db.Delete(key, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("pay index_mismatch index=%d", first)}
		}, "key missing"},
		{"extra id key", func(t *testing.T, db *pebble.DB, id uint32) []string {
			// A key in the chunk's range that no bucket byte reaches.
			k := append(packedIndexKey('i', id, 0, 0), 0)
			if err := db.Set(k, []byte{1, 2, 3, 4, 0, 9}, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			return []string{"pay index_mismatch"}
		}, "key of 11 bytes in a packed chunk"},
		{"entry missing in the chunk", func(t *testing.T, db *pebble.DB, id uint32) []string {
			if err := db.Delete(entryKey(id, e), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("pay entry_missing index=%d", e)}
		}, ""},
		{"payload byte in the chunk", func(t *testing.T, db *pebble.DB, id uint32) []string {
			flip(t, db, entryKey(id, e), func(n int) int { return n - 1 })
			return []string{fmt.Sprintf("pay leaf_mismatch index=%d tile=0/%d", e, e/256)}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, k := indexStore(t)
			var want []string
			editPebble(t, dir, func(db *pebble.DB, id uint32) { want = tc.edit(t, db, id) })
			rs, err := ledger.OpenRaw(dir, quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			c := &collector{}
			if err := checkers.NewScrub(checkers.RawSource(rs), k.verifier).Run(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			if d := describe(c.findings); !slices.Equal(d, want) {
				t.Fatalf("findings %q, want %q\n%v", d, want, c.findings)
			}
			if c.entries != indexTotal {
				t.Errorf("checked %d entries, want %d", c.entries, indexTotal)
			}
			if tc.detail != "" && !strings.Contains(c.findings[0].Detail, tc.detail) {
				t.Errorf("detail %q does not say %q", c.findings[0].Detail, tc.detail)
			}
		})
	}
}

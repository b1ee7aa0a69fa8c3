package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// appendN appends ids "id-<from>".."id-<to-1>" in requests of 4096.
func appendN(t *testing.T, l *Log, from, to int) {
	t.Helper()
	for i := from; i < to; {
		var es []Entry
		for ; i < to && len(es) < 4096; i++ {
			es = append(es, Entry{ID: fmt.Sprint("id-", i), Payload: []byte(fmt.Sprint(i))})
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
}

// checkLookups checks id and leaf-hash lookups of entries in every chunk and
// in the memory index, and that the id filter and indexes still catch
// duplicates and conflicts of old ids.
func checkLookups(t *testing.T, l *Log, n int) {
	t.Helper()
	for _, i := range []int{0, 1, indexChunk - 1, indexChunk, indexChunk + 7, 2*indexChunk - 1, 2 * indexChunk, n - 1} {
		if i >= n {
			continue
		}
		rec, err := l.EntryByID(fmt.Sprint("id-", i))
		if err != nil || rec.Index != uint64(i) {
			t.Fatalf("EntryByID(id-%d) = %v, %v", i, rec, err)
		}
		idx, err := l.IndexByLeafHash(rec.LeafHash)
		if err != nil || idx != uint64(i) {
			t.Fatalf("IndexByLeafHash(leaf %d) = %d, %v", i, idx, err)
		}
	}
	if _, err := l.EntryByID("absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("EntryByID(absent) = %v, want ErrNotFound", err)
	}
	res, err := l.Append(context.Background(), []Entry{{ID: "id-3", Payload: []byte("3")}})
	if err != nil || !res.Entries[0].Duplicate || res.Entries[0].Index != 3 || l.Size() != uint64(n) {
		t.Fatalf("re-appending id-3: %+v, %v (size %d)", res, err, l.Size())
	}
	if _, err := l.Append(context.Background(), []Entry{{ID: "id-3", Payload: []byte("other")}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting id-3: %v, want ErrConflict", err)
	}
}

// Past a chunk of entries the indexes move out of memory into ingested
// sstables; lookups, duplicates and conflicts work the same on either side,
// across a reopen, and after a crash that lost the record of an ingestion.
func TestIndexChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 131,172 entries")
	}
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "chunks")
	n := 2*indexChunk + 100
	appendN(t, l, 0, n)
	if got := l.chunks.Load(); got != 2 {
		t.Fatalf("%d chunks ingested, want 2", got)
	}
	if got := len(l.tail.lookup(kindIDIndex, idHash("id-0"))); got != 0 {
		t.Fatalf("id-0 still in the memory index after its chunk was ingested")
	}
	checkLookups(t, l, n)

	s = reopen(t, s)
	l, _ = s.Log("chunks")
	if got := l.chunks.Load(); got != 2 {
		t.Fatalf("after reopen %d chunks, want 2", got)
	}
	checkLookups(t, l, n)

	// A crash after ingesting chunks but before recording it: the next open
	// rebuilds them from the entries and ingests them again.
	if err := s.db.Set(chunksKey(l.id), binary.BigEndian.AppendUint64(nil, 0), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	l, _ = s.Log("chunks")
	if got := l.chunks.Load(); got != 2 {
		t.Fatalf("after the lost record %d chunks, want 2 again", got)
	}
	checkLookups(t, l, n)
	appendN(t, l, n, n+10)
	checkLookups(t, l, n+10)
}

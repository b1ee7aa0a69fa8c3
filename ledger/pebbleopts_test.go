package ledger

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestTablesSplitByKind checks what tableSpan is for: no table holds a log's
// entries or index buckets together with other keys, so that an ingested
// index chunk overlaps nothing and lands in the bottom level. The store is
// flushed in the middle of each chunk, so that a flushed table of entries,
// checkpoints, metadata and tiles is there when the chunk is ingested:
// without the split it spans the index's key range and the chunk lands in
// level 0.
func TestTablesSplitByKind(t *testing.T) {
	if testing.Short() {
		t.Skip("appends two index chunks of entries")
	}
	t.Parallel()
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprint("split=", split), func(t *testing.T) {
			t.Parallel()
			var opts []Option
			if !split {
				opts = append(opts, func(o *options) {
					o.tune = func(po *pebble.Options) { po.Experimental.SpanPolicyFunc = nil }
				})
			}
			s, _ := newTestStore(t, opts...)
			a, b := mustCreateLog(t, s, "a"), mustCreateLog(t, s, "b")
			for c := 0; c < 2; c++ {
				base := c * indexChunk
				appendN(t, a, base, base+indexChunk/2)
				appendN(t, b, 2*base, 2*base+10)
				if err := s.db.Flush(); err != nil {
					t.Fatal(err)
				}
				appendN(t, a, base+indexChunk/2, base+indexChunk+10)
			}
			if got := a.chunks.Load(); got != 2 {
				t.Fatalf("%d chunks ingested, want 2", got)
			}
			tables, err := s.db.SSTables()
			if err != nil {
				t.Fatal(err)
			}
			var mixed, indexTables, indexAbove int
			for level, ts := range tables {
				for _, ti := range ts {
					lo, hi := ti.Smallest.UserKey, ti.Largest.UserKey
					own := func(k []byte) bool { return k[0] == kindEntry || k[0] == kindHashIndex || k[0] == kindIDIndex }
					if (own(lo) || own(hi)) && (lo[0] != hi[0] || string(lo[1:5]) != string(hi[1:5])) {
						mixed++
						t.Logf("L%d table %s: %q .. %q", level, ti.FileNum, lo, hi)
					}
					if lo[0] == kindHashIndex || lo[0] == kindIDIndex {
						indexTables++
						if level != len(tables)-1 {
							indexAbove++
						}
					}
				}
			}
			// Two chunks of two indexes: four tables, each all its own,
			// in the bottom level.
			good := mixed == 0 && indexTables == 4 && indexAbove == 0
			if split && !good {
				t.Errorf("%d tables mix entries or index buckets with other keys; %d index tables (want 4), %d of them above the bottom level", mixed, indexTables, indexAbove)
			}
			if !split && good {
				// The control: without the split the layout has the
				// problem the split is for, so the check above can fail.
				t.Errorf("without the split every index table still reached the bottom level on its own")
			}
		})
	}
}

func TestTableSpanEnds(t *testing.T) {
	for _, c := range []struct {
		start, end []byte
	}{
		{nil, []byte{kindEntry}},
		{[]byte{kindCheckpoint}, []byte{kindEntry}},
		{entryKey(7, 99), logKey(kindEntry, 8, 0)},
		{logKey(kindEntry, 0xffffffff, 0), []byte{kindEntry + 1}},
		{[]byte{kindEntry}, logKey(kindEntry, 1, 0)},
		{[]byte{kindEntry, 1}, logKey(kindEntry, 1<<24+1, 0)},
		{[]byte{kindEntry + 1}, []byte{kindHashIndex}},
		{logKey(kindHashIndex, 3, 0), logKey(kindHashIndex, 4, 0)},
		{[]byte{kindHashIndex - 1, 9}, []byte{kindHashIndex}},
		{logKey(kindIDIndex, 3, 0), logKey(kindIDIndex, 4, 0)},
		{metaKey(3), nil},
		{tileKey(3, 0, 5), nil},
	} {
		_, end, err := tableSpan(c.start)
		if err != nil || string(end) != string(c.end) {
			t.Errorf("tableSpan(%q) ends at %q, %v; want %q", c.start, end, err, c.end)
		}
		if end != nil && string(end) <= string(c.start) {
			t.Errorf("tableSpan(%q) ends at %q, not after its start", c.start, end)
		}
	}
}

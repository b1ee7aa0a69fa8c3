package ledger

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
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
		{metaKey(3), []byte{kindTile}},
		{tileKey(3, 0, 5), append(logKey(kindTile, 3, 1), 1)},
		{tileKey(3, 2, 0), append(logKey(kindTile, 3, 1), 3)},
		{tileKey(3, 255, 7), logKey(kindTile, 4, 0)},
		{tileKey(0xffffffff, 255, 7), []byte{kindTile + 1}},
		{[]byte{kindTile}, append(logKey(kindTile, 0, 1), 1)},
		{[]byte{kindLayout}, nil},
		{chunksKey(3), nil},
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

// The store's policy gives tables of their own to big logs only; the
// small logs between two big ones share theirs.
func TestTableSpanEndsBigLogs(t *testing.T) {
	var big bigLogs
	big.add(9)
	big.add(5)
	big.add(5)
	for _, c := range []struct {
		start, end []byte
	}{
		{entryKey(2, 0), logKey(kindEntry, 5, 0)},
		{entryKey(5, 7), logKey(kindEntry, 6, 0)},
		{entryKey(6, 0), logKey(kindEntry, 9, 0)},
		{entryKey(10, 0), []byte{kindEntry + 1}},
		{logKey(kindIDIndex, 7, 0), logKey(kindIDIndex, 9, 0)},
		{tileKey(3, 1, 0), logKey(kindTile, 5, 0)},
		{tileKey(9, 0, 5), append(logKey(kindTile, 9, 1), 1)},
		{tileKey(0xffffffff, 0, 0), []byte{kindTile + 1}},
		{metaKey(3), []byte{kindTile}},
		{nil, []byte{kindEntry}},
	} {
		_, end, err := big.tableSpan(c.start)
		if err != nil || string(end) != string(c.end) {
			t.Errorf("tableSpan(%q) ends at %q, %v; want %q", c.start, end, err, c.end)
		}
	}
}

// TestEntriesMoveDown checks what the level-0 settings and the tiles'
// tables of their own are for: entries are written by a flush and then
// moved down the levels, not rewritten by compactions. 1,000-entry
// appends of 256-byte incompressible payloads go through a small
// memtable, so that there are many flushes and compactions; the bytes of
// the entry tables compactions wrote (a move writes none) must be a small
// part of the payloads. The control runs the settings the store had
// before (level 0 compacted at four sublevels, flushes split at 2 MiB,
// tiles sharing tables), under which compactions rewrite at least a third
// of the entries (half of them here).
func TestEntriesMoveDown(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 120,000 entries")
	}
	// Not parallel: whether compactions keep up with the flushes depends on
	// the CPU they get, and beside the package's other tests they fell
	// behind often enough to rewrite 9 MB in one run of ten.
	for _, before := range []bool{false, true} {
		t.Run(fmt.Sprint("before=", before), func(t *testing.T) {
			var mu sync.Mutex
			var rewritten, moved uint64 // bytes of entry tables
			s, _ := newTestStore(t, func(o *options) {
				o.tune = func(po *pebble.Options) {
					po.MemTableSize = 2 << 20
					po.EventListener.CompactionEnd = func(info pebble.CompactionInfo) {
						if info.Err != nil {
							return
						}
						mu.Lock()
						defer mu.Unlock()
						for _, ti := range info.Output.Tables {
							if k := ti.Smallest.UserKey; len(k) > 0 && k[0] == kindEntry {
								if info.Reason == "move" {
									moved += ti.Size
								} else {
									rewritten += ti.Size
								}
							}
						}
					}
					if before {
						po.L0CompactionThreshold = 4
						po.TargetFileSizes[0] = 2 << 20
						po.FlushSplitBytes = 4 << 20
						po.Experimental.SpanPolicyFunc = func(start []byte) (pebble.SpanPolicy, []byte, error) {
							return spanEnd([]byte{kindEntry, kindHashIndex, kindIDIndex}, start, nil)
						}
					}
				}
			})
			l := mustCreateLog(t, s, "x")
			rng := rand.New(rand.NewPCG(1, 2))
			const n, batch = 120_000, 1000
			for i := 0; i < n; i += batch {
				es := make([]Entry, batch)
				for j := range es {
					pl := make([]byte, 256)
					for k := 0; k < len(pl); k += 8 {
						binary.LittleEndian.PutUint64(pl[k:], rng.Uint64())
					}
					es[j] = Entry{ID: fmt.Sprint("e-", i+j), Payload: pl}
				}
				if _, err := l.Append(context.Background(), es); err != nil {
					t.Fatal(err)
				}
			}
			m := s.db.Metrics()
			var flushed uint64
			for _, lm := range m.Levels {
				flushed += lm.TableBytesFlushed
			}
			mu.Lock()
			defer mu.Unlock()
			payloads := uint64(n * 256)
			t.Logf("payloads %d KiB, flushed %d KiB; entry tables compactions rewrote %d KiB, moved %d KiB; %d compactions, %d moves",
				payloads>>10, flushed>>10, rewritten>>10, moved>>10, m.Compact.Count, m.Compact.MoveCount)
			if flushed < payloads/2 {
				t.Fatalf("flushed %d bytes of %d bytes of payloads: the appends did not go through flushes", flushed, payloads)
			}
			if before {
				if rewritten < payloads/3 {
					t.Errorf("before: compactions rewrote %d bytes of entry tables, under a third of the %d bytes of payloads; the control shows no rewrite", rewritten, payloads)
				}
				return
			}
			// 0.8 MB of 30 here (the first flush's tables); a compaction
			// that falls behind the flushes and merges two tables of
			// entries costs 4 MB.
			if rewritten > payloads/5 {
				t.Errorf("compactions rewrote %d bytes of entry tables, over a fifth of the %d bytes of payloads", rewritten, payloads)
			}
			if moved < payloads/2 {
				t.Errorf("%d bytes of entry tables moved, under half the %d bytes of payloads", moved, payloads)
			}
		})
	}
}

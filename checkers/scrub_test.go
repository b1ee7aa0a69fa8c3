package checkers_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// The test store: 5,000 entries (past the 256 and 1,024 tile boundaries,
// several full level-0 tiles, a partial level-1 tile with level-4 hashes),
// one checkpoint per 500.
const (
	smallTotal = 5000
	smallBatch = 500
)

var (
	smallOnce sync.Once
	smallDir  string
	smallKey  testKey
)

// smallStore builds the test store once and returns a fresh copy of it.
func smallStore(t *testing.T) (string, testKey) {
	t.Helper()
	smallOnce.Do(func() {
		smallKey = newKey(t)
		dir, err := makeTempDir()
		if err != nil {
			t.Fatal(err)
		}
		st := smallKey.open(t, dir, ledger.WithCheckpointInterval(0))
		fillLog(t, st, "pay", smallTotal, smallBatch, 64)
		fillLog(t, st, "other", 300, 100, 16)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		smallDir = dir
	})
	if smallDir == "" {
		t.Fatal("test store not built")
	}
	return copyDir(t, smallDir), smallKey
}

// describe renders findings for comparison: log, index or tile or
// checkpoint, kind.
func describe(fs []checkers.Finding) []string {
	var out []string
	for _, f := range fs {
		s := f.Log + " " + f.Kind
		if f.Index != nil {
			s += fmt.Sprintf(" index=%d", *f.Index)
		}
		if f.Tile != "" {
			s += " tile=" + f.Tile
		}
		if f.Checkpoint != nil {
			s += fmt.Sprintf(" checkpoint=%d", *f.Checkpoint)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestScrubClean(t *testing.T) {
	t.Parallel()
	dir, k := smallStore(t)
	c := checkRaw(t, dir, k.verifier)
	if len(c.findings) != 0 {
		t.Fatalf("clean store: findings %v", c.findings)
	}
	if c.entries != smallTotal+300 {
		t.Errorf("checked %d entries, want %d", c.entries, smallTotal+300)
	}
	// And on the live store, over a snapshot.
	st := k.open(t, dir)
	if c := checkAll(t, checkers.StoreSource(st), k.verifier); len(c.findings) != 0 {
		t.Fatalf("live store: findings %v", c.findings)
	}
}

// TestScrubFaults corrupts one stored value per case and checks that the
// scrub and the audit report exactly it.
func TestScrubFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		edit  func(t *testing.T, db *pebble.DB, id uint32)
		want  []string
		extra string // a kind the audit may add (proofs read the bad tile)
	}{
		{"payload byte", func(t *testing.T, db *pebble.DB, id uint32) {
			flip(t, db, entryKey(id, 700), func(n int) int { return n - 1 })
		}, []string{"pay leaf_mismatch index=700 tile=0/2"}, ""},
		{"level-0 base hash", func(t *testing.T, db *pebble.DB, id uint32) {
			flip(t, db, tileKey(id, 0, 5), func(int) int { return 17*32 + 3 })
		}, []string{"pay tile_mismatch tile=0/5"}, ""},
		{"level-0 mid hash", func(t *testing.T, db *pebble.DB, id uint32) {
			flip(t, db, tileKey(id, 0, 6), func(int) int { return (256+3)*32 + 5 })
		}, []string{"pay tile_mismatch tile=0/6"}, ""},
		{"level-1 base hash", func(t *testing.T, db *pebble.DB, id uint32) {
			flip(t, db, tileKey(id, 1, 0), func(int) int { return 2*32 + 1 })
		}, []string{"pay tile_mismatch tile=1/0"}, ledger.IntegrityConsistencyBad},
		{"level-1 mid hash", func(t *testing.T, db *pebble.DB, id uint32) {
			// 5000>>8 = 19 base hashes, then 1 level-4 hash.
			flip(t, db, tileKey(id, 1, 0), func(int) int { return 19*32 + 9 })
		}, []string{"pay tile_mismatch tile=1/0"}, ledger.IntegrityConsistencyBad},
		{"missing entry", func(t *testing.T, db *pebble.DB, id uint32) {
			if err := db.Delete(entryKey(id, 1500), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"pay entry_missing index=1500"}, ""},
		{"missing tile", func(t *testing.T, db *pebble.DB, id uint32) {
			if err := db.Delete(tileKey(id, 0, 3), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"pay tile_missing tile=0/3"}, ledger.IntegrityConsistencyBad},
		{"edited checkpoint", func(t *testing.T, db *pebble.DB, id uint32) {
			flip(t, db, checkpointKey(id, 1500), func(int) int { return 20 })
		}, []string{"pay checkpoint_bad checkpoint=1500"}, ""},
		{"entry beyond the tree", func(t *testing.T, db *pebble.DB, id uint32) {
			if err := db.Set(entryKey(id, smallTotal+5), []byte{0}, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"pay rollback index=5005"}, ""},
		{"undecodable entry", func(t *testing.T, db *pebble.DB, id uint32) {
			if err := db.Set(entryKey(id, 2600), []byte{0xff}, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, []string{"pay entry_corrupt index=2600"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, k := smallStore(t)
			editPebble(t, dir, func(db *pebble.DB, id uint32) { tc.edit(t, db, id) })
			c := checkRaw(t, dir, k.verifier)
			var got []checkers.Finding
			for _, f := range c.findings {
				if tc.extra != "" && f.Kind == tc.extra && f.Checkpoint != nil {
					continue
				}
				got = append(got, f)
			}
			if d := describe(got); !slices.Equal(d, tc.want) {
				t.Errorf("findings %q, want %q\n%v", d, tc.want, c.findings)
			}
		})
	}
}

// TestScrubResignedCheckpoint forges an older checkpoint with the log's
// own key (a signer who lied once): the signature verifies, so only the
// tree can tell, and both checkers do.
func TestScrubResignedCheckpoint(t *testing.T) {
	t.Parallel()
	dir, k := smallStore(t)
	editPebble(t, dir, func(db *pebble.DB, id uint32) {
		cp := merkle.Checkpoint{Origin: k.verifier.Name() + "/pay", Size: 2000, Root: merkle.LeafHash([]byte("forged"))}
		n, err := cp.Sign(k.signer)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set(checkpointKey(id, 2000), n, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	c := checkRaw(t, dir, k.verifier)
	want := []string{"pay consistency_bad checkpoint=2000", "pay root_mismatch checkpoint=2000"}
	if d := describe(c.findings); !slices.Equal(d, want) {
		t.Errorf("findings %q, want %q", d, want)
	}
}

// TestScrubCancel stops a pass when Checked reports the end of its context.
func TestScrubCancel(t *testing.T) {
	t.Parallel()
	dir, k := smallStore(t)
	rs, err := ledger.OpenRaw(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p := &cancelAfter{n: 1, cancel: cancel}
	err = checkers.NewScrub(checkers.RawSource(rs), k.verifier).Run(ctx, p)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Checked(ctx context.Context, n int) error {
	if c.n--; c.n <= 0 {
		c.cancel()
	}
	return ctx.Err()
}
func (c *cancelAfter) Found(checkers.Finding) {}

// TestScrubLive scrubs a live store while appends go on: each pass reads
// one snapshot, so a growing log is never reported.
func TestScrubLive(t *testing.T) {
	k := newKey(t)
	st := k.open(t, t.TempDir(), ledger.WithCheckpointInterval(time.Millisecond))
	fillLog(t, st, "pay", 1000, 250, 40)
	l, _ := st.Log("pay")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for i := 1000; ctx.Err() == nil; i += 37 {
			es := make([]ledger.Entry, 37)
			for j := range es {
				es[j] = testEntry(i+j, 40)
			}
			if _, err := l.Append(context.Background(), es); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	passes := 0
	for start := time.Now(); time.Since(start) < time.Second || passes < 5; passes++ {
		if c := checkAll(t, checkers.StoreSource(st), k.verifier); len(c.findings) != 0 {
			t.Fatalf("pass %d at size %d: %v", passes, l.Size(), c.findings)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d clean passes while the log grew to %d", passes, l.Size())
}

package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// FuzzScanLeafHash checks the scan's leaf hash (storedEntry.decode, hashed
// in place) against decodeStored (the same decoder, copied into a Record):
// for any stored value both accept or both refuse it, and the leaf hashes
// agree.
func FuzzScanLeafHash(f *testing.F) {
	for _, s := range fuzzStoredSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var sc scratch
		h, err := sc.leafHash(fuzzLogName, b)
		rec, err2 := decodeStored(fuzzLogName, 7, b)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("scan decoder: %v; decodeStored: %v", err, err2)
		}
		if err == nil && h != rec.LeafHash {
			t.Fatalf("scan leaf hash %s, decodeStored %s", h, rec.LeafHash)
		}
		// A second use of the same scratch gives the same answer.
		h2, err3 := sc.leafHash(fuzzLogName, b)
		if h2 != h || (err3 == nil) != (err == nil) {
			t.Fatalf("scratch reuse: %s %v, then %s %v", h, err, h2, err3)
		}
	})
}

// TestRawLogScan reads a log past several scan batches with entries
// deleted and corrupted: each is reported in its slot and the others keep
// their leaf hashes, which equal the tiles'.
func TestRawLogScan(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l, err := s.CreateLog("scan")
	if err != nil {
		t.Fatal(err)
	}
	const total = 3*scanBatchSize + 77
	ctx := context.Background()
	for next := 0; next < total; next += 1000 {
		es := make([]Entry, min(1000, total-next))
		for j := range es {
			es[j] = Entry{ID: fmt.Sprint(next + j), Payload: []byte(fmt.Sprintf("payload %d", next+j))}
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	id := l.id
	// Break some entries through the store's own database before the scan.
	missing := []uint64{0, scanBatchSize - 1, scanBatchSize, scanBatchSize + 1, total - 1}
	for _, i := range missing {
		if err := s.db.Delete(entryKey(id, i), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	corrupt := uint64(2*scanBatchSize + 5)
	if err := s.db.Set(entryKey(id, corrupt), []byte{0xff, 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	r, err := l.Raw()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != total {
		t.Fatalf("raw size %d, want %d", r.Size(), total)
	}
	want := uint64(0)
	batches := 0
	err = r.scan(ctx, 0, total, func(es []ScannedEntry) error {
		batches++
		for _, e := range es {
			if e.Index != want {
				t.Fatalf("entry %d where %d was due", e.Index, want)
			}
			want++
			isMissing := false
			for _, m := range missing {
				isMissing = isMissing || m == e.Index
			}
			switch {
			case isMissing:
				if e.Err == nil || e.Err.Kind != IntegrityEntryMissing || e.Err.Index != int64(e.Index) {
					t.Errorf("entry %d: %+v, want entry_missing", e.Index, e.Err)
				}
			case e.Index == corrupt:
				if e.Err == nil || e.Err.Kind != IntegrityEntryCorrupt {
					t.Errorf("entry %d: %+v, want entry_corrupt", e.Index, e.Err)
				}
			default:
				if e.Err != nil {
					t.Fatalf("entry %d: %v", e.Index, e.Err)
				}
				base, _, err := r.Tile(0, e.Index/tileWidth)
				if err != nil {
					t.Fatal(err)
				}
				if base[e.Index%tileWidth] != e.LeafHash {
					t.Fatalf("entry %d: leaf hash %s, the tile's %s", e.Index, e.LeafHash, base[e.Index%tileWidth])
				}
			}
		}
		return nil
	})
	if err != nil || want != total || batches != 4 {
		t.Fatalf("Scan = %v after %d entries in %d batches", err, want, batches)
	}
	// An error from fn stops the scan and is returned.
	stop := errors.New("stop")
	calls := 0
	if err := r.scan(ctx, 0, total, func([]ScannedEntry) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("Scan with a failing fn = %v after %d calls", err, calls)
	}
	// So does the end of the context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.scan(cctx, 0, total, func([]ScannedEntry) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Scan with an ended context = %v", err)
	}
}

// TestOpenRaw opens a closed store read-only: it opens a store that Open
// refuses, writes nothing (every file is as it was), and refuses a
// directory without a store or one a Store holds.
func TestOpenRaw(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l, err := s.CreateLog("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), []Entry{{ID: "x", Payload: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, s)
	if _, err := OpenRaw(cfg.dir); err == nil {
		t.Fatal("OpenRaw of a store a Store holds succeeded")
	}
	s.Close()
	// Make Open refuse the store: the latest checkpoint no longer
	// matches the tree.
	db, err := pebble.Open(cfg.dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(tileKey(l.id, 0, 0), make([]byte, merkle.HashSize), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if st, err := Open(cfg.dir, cfg.signer, cfg.verifier, cfg.opts...); err == nil {
		st.Close()
		t.Fatal("Open accepted the broken store")
	}
	before := snapshotDir(t, cfg.dir)
	rs, err := OpenRaw(cfg.dir)
	if err != nil {
		t.Fatalf("OpenRaw: %v", err)
	}
	names, err := rs.Logs()
	if err != nil || len(names) != 1 || names[0] != "a" {
		t.Fatalf("Logs = %v, %v", names, err)
	}
	r, err := rs.Log("a")
	if err != nil {
		t.Fatal(err)
	}
	cps, err := r.Checkpoints()
	// The checkpoint of the empty log signed at creation, then size 1.
	if err != nil || len(cps) != 2 || cps[0].Size != 0 || cps[1].Size != 1 {
		t.Fatalf("Checkpoints = %v, %v", cps, err)
	}
	if _, err := rs.Log("b"); !errors.Is(err, ErrLogNotFound) {
		t.Errorf("Log(b) = %v", err)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	after := snapshotDir(t, cfg.dir)
	for name, b := range before {
		if after[name] != b {
			t.Errorf("%s changed", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && name != "LOCK" {
			t.Errorf("%s appeared", name)
		}
	}
	if _, err := OpenRaw(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("OpenRaw of a missing directory succeeded")
	}
	if _, err := OpenRaw(t.TempDir()); err == nil {
		t.Error("OpenRaw of an empty directory succeeded")
	}
}

func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	// Every file below dir (the checkpoint files live in a subdirectory).
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRawLogScanBoundsBatchBytes checks that a scan of large entries hands
// out batches of at most scanBatchBytes of stored entries (plus the one
// that crossed the bound), not scanBatchSize of them: 4 batches of 4,096
// large payloads in flight once took a daemon's scrub past 1 GiB.
func TestRawLogScanBoundsBatchBytes(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(0))
	l, err := s.CreateLog("big")
	if err != nil {
		t.Fatal(err)
	}
	const total, size = 40, 200 << 10 // 8 MB of payloads
	ctx := context.Background()
	for i := 0; i < total; i++ {
		p := bytes.Repeat([]byte{byte(i)}, size)
		if _, err := l.Append(ctx, []Entry{{ID: fmt.Sprint(i), Payload: p}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Raw()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	perBatch := scanBatchBytes/size + 1 // the entry that reaches the bound is the batch's last
	seen, batches := 0, 0
	err = r.scan(ctx, 0, total, func(b []ScannedEntry) error {
		batches++
		if len(b) > perBatch {
			t.Errorf("batch %d holds %d entries of %d bytes, want at most %d", batches, len(b), size, perBatch)
		}
		for _, e := range b {
			if e.Err != nil {
				t.Errorf("entry %d: %v", e.Index, e.Err)
			}
			seen++
		}
		return nil
	})
	if err != nil || seen != total {
		t.Fatalf("Scan: %d entries in %d batches, %v; want %d", seen, batches, err, total)
	}
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackupSnapshotUnderAppends takes a snapshot while two logs take
// appends and checkpoints: the copy opens (so no checkpoint file in it is
// ahead of its entries, which Open would refuse), holds every append
// acknowledged before the call, byte for byte, and the live store goes on.
func TestBackupSnapshotUnderAppends(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(2*time.Millisecond))
	cfg := testConfig(t, s)
	logs := []*Log{mustCreateLog(t, s, "orders"), mustCreateLog(t, s, "payments")}
	ctx, cancel := context.WithCancel(context.Background())
	var acked [2]atomic.Uint64 // per log, the size every acknowledged append is below
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for i, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				es := make([]Entry, 20)
				for j := range es {
					es[j] = Entry{ID: fmt.Sprintf("%s-%d-%d", l.Name(), n, j), Payload: []byte(fmt.Sprintf(`{"n":%d}`, n*20+j)), PayloadJSON: true}
				}
				res, err := l.Append(context.Background(), es)
				if err != nil {
					errc <- err
					return
				}
				acked[i].Store(res.Size)
			}
		}()
	}
	waitFor := func(min uint64) {
		deadline := time.Now().Add(20 * time.Second)
		for acked[0].Load() < min || acked[1].Load() < min {
			if time.Now().After(deadline) {
				t.Fatalf("appends stalled at %d, %d", acked[0].Load(), acked[1].Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(1200) // past a tile (256) and a read batch (1,024)
	before := [2]uint64{acked[0].Load(), acked[1].Load()}
	dir := filepath.Join(t.TempDir(), "snap")
	snap, err := s.Snapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(before[0] + 200) // the live store goes on
	cancel()
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("append during the snapshot: %v", err)
	default:
	}
	if got := snap.Logs(); len(got) != 2 || got[0] != "orders" || got[1] != "payments" {
		t.Fatalf("snapshot's checkpoint files: %v", got)
	}
	if _, err := s.Snapshot(dir); err == nil {
		t.Error("a snapshot into an existing directory was taken")
	}

	// The copy, with its checkpoint files where Open looks for them.
	if err := os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range snap.Checkpoints {
		if err := os.WriteFile(filepath.Join(dir, "checkpoints", name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(dir, cfg.signer, cfg.verifier, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("open the snapshot: %v", err)
	}
	defer c.Close()
	for i, l := range logs {
		cl := mustLog(t, c, l.Name())
		if cl.Size() < before[i] {
			t.Errorf("%s: the snapshot holds %d entries, but %d were acknowledged before it was taken", l.Name(), cl.Size(), before[i])
		}
		if cl.Size() >= l.Size() {
			t.Errorf("%s: the snapshot holds %d entries, the live log %d: appends after it are in it", l.Name(), cl.Size(), l.Size())
		}
		for _, idx := range []uint64{0, 255, 256, 1023, 1024, before[i] - 1, cl.Size() - 1} {
			if a, b := mustEntry(t, l, idx), mustEntry(t, cl, idx); a.LeafHash != b.LeafHash || string(a.Payload) != string(b.Payload) {
				t.Errorf("%s[%d] differs in the snapshot", l.Name(), idx)
			}
		}
		if r1, r2 := mustRootAt(t, l, cl.Size()), mustRootAt(t, cl, cl.Size()); r1 != r2 {
			t.Errorf("%s: root at %d differs in the snapshot", l.Name(), cl.Size())
		}
	}
}

// TestBackupSnapshotClosed: a closed store takes no snapshot.
func TestBackupSnapshotClosed(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	s.Close()
	if _, err := s.Snapshot(filepath.Join(t.TempDir(), "snap")); !errors.Is(err, ErrClosed) {
		t.Errorf("snapshot of a closed store: %v, want ErrClosed", err)
	}
}

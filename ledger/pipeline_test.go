package ledger

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// The writer stages a group while the ones before it wait for their WAL
// sync (writer.go). An id sent again while its first sending is still in
// flight is a duplicate of it, not a new entry: 8 clients send the same
// 3,000 ids (past tile and read-batch bounds) in small requests, in
// different orders, with groups kept small so that many are in flight.
func TestPipelineDuplicatesInFlight(t *testing.T) {
	t.Parallel()
	testDuplicatesInFlight(t, 3000, 8, 10, 20)
}

// The same across an index chunk boundary: the publisher ingests the chunk
// and drops it from memory while the writer looks ids up.
func TestPipelineDuplicatesAcrossChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("appends an index chunk of entries")
	}
	t.Parallel()
	testDuplicatesInFlight(t, indexChunk+2048, 3, 128, 256)
}

// testDuplicatesInFlight has clients send the same ids, per per request in
// different orders, to a log whose groups hold at most maxBatch entries,
// and checks that each id got one index, the same for every client.
func testDuplicatesInFlight(t *testing.T, ids, clients, per, maxBatch int) {
	if ids%per != 0 {
		t.Fatalf("%d ids do not split into requests of %d", ids, per)
	}
	s, _ := newTestStore(t, WithCheckpointInterval(0), WithMaxBatch(maxBatch))
	l := mustCreateLog(t, s, "dups")
	entry := func(i int) Entry {
		return Entry{ID: fmt.Sprintf("ev-%05d", i), Payload: []byte(fmt.Sprint(`{"n":`, i, `}`))}
	}
	got := make([][]uint64, clients) // got[c][i]: the index client c was told for id i
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		got[c] = make([]uint64, ids)
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.New(rand.NewPCG(uint64(c), 1)).Perm(ids / per)
			for _, b := range order {
				es := make([]Entry, per)
				for j := range es {
					es[j] = entry(b*per + j)
				}
				res, err := l.Append(context.Background(), es)
				if err != nil {
					errs <- err
					return
				}
				for j, a := range res.Entries {
					got[c][b*per+j] = a.Index
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if l.Size() != uint64(ids) {
		t.Fatalf("log holds %d entries for %d distinct ids", l.Size(), ids)
	}
	// One scan of the stored entries (a read per entry is slow under
	// -race): each entry's id key and recomputed leaf hash.
	idKeys := make([]uint64, ids)
	leaves := make([]merkle.Hash, ids)
	r, err := l.Raw()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.scan(context.Background(), 0, uint64(ids), func(es []ScannedEntry) error {
		for _, e := range es {
			if e.Err != nil {
				return e.Err
			}
			idKeys[e.Index], leaves[e.Index] = e.idKey, e.LeafHash
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, ids)
	for i := range ids {
		idx := got[0][i]
		for c := 1; c < clients; c++ {
			if got[c][i] != idx {
				t.Fatalf("id %d: client 0 was told index %d, client %d index %d", i, idx, c, got[c][i])
			}
		}
		if seen[idx] {
			t.Fatalf("index %d given to two ids", idx)
		}
		seen[idx] = true
		if idKeys[idx] != idHash(entry(i).ID) {
			t.Fatalf("entry %d does not hold id %s", idx, entry(i).ID)
		}
	}
	for _, i := range []int{0, ids / 2, ids - 1} { // and a few read in full
		if rec := mustEntry(t, l, got[0][i]); rec.Leaf.ID != entry(i).ID {
			t.Fatalf("entry %d holds id %s, want %s", got[0][i], rec.Leaf.ID, entry(i).ID)
		}
	}
	if want := rootOf(t, leaves); mustRootAt(t, l, uint64(ids)) != want {
		t.Fatal("the log's root is not the root of its entries")
	}
}

// A WAL whose writes start failing while 8 clients append (groups kept
// small, so that several are in flight when it does) loses nothing that was
// acknowledged. Pebble panics when a WAL write fails (the next commit finds
// the writer broken), so the appends run in a child process: it prints each
// acknowledgement as it gets it, then the data directory is opened again on
// a sound disk, where every acknowledged entry must be at its index, the
// tree must match its entries, and the checkpoints signed before the fault
// must be consistent with it (no signed size was undone).
func TestPipelineWALFailureLosesNothingAcked(t *testing.T) {
	if dir := os.Getenv("AUDITD_TEST_WAL_CHILD"); dir != "" {
		walFailureChild(t, dir)
		return
	}
	t.Parallel()
	skey, vkey, err := note.GenerateKey(crand.Reader, testKeyName)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPipelineWALFailureLosesNothingAcked$", "-test.v")
	cmd.Env = append(os.Environ(), "AUDITD_TEST_WAL_CHILD="+dir, "AUDITD_TEST_WAL_KEYS="+skey+" "+vkey)
	out, err := cmd.CombinedOutput()
	acked := map[string]uint64{}
	fault := false
	for _, line := range strings.Split(string(out), "\n") {
		var id string
		var idx uint64
		if n, _ := fmt.Sscanf(line, "ACK %s %d", &id, &idx); n == 2 {
			acked[id] = idx
		}
		fault = fault || line == "FAULT"
	}
	// After the fault the child either panics in Pebble (usual: the next
	// commit finds the WAL writer broken) or has its appends refused.
	if !fault || !strings.Contains(string(out), "panic: ") && !strings.Contains(string(out), "REFUSED") {
		tail := string(out)[max(0, len(out)-4000):]
		t.Fatalf("child (%v) did not hit the injected fault; the end of its output:\n%s", err, tail)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	s := openTestStore(t, testStoreConfig{dir: dir, signer: signer, verifier: verifier, opts: []Option{WithLogger(slog.New(slog.DiscardHandler))}})
	l := mustLog(t, s, "wal")
	size := l.Size()
	if size < uint64(len(acked)) {
		t.Fatalf("reopened log holds %d entries, %d were acknowledged", size, len(acked))
	}
	for id, idx := range acked {
		if idx >= size {
			t.Fatalf("acknowledged %s at %d; the log holds %d entries", id, idx, size)
		}
		if rec := mustEntry(t, l, idx); rec.Leaf.ID != id {
			t.Fatalf("acknowledged %s at %d; the entry there is %s", id, idx, rec.Leaf.ID)
		}
	}
	leaves := make([]merkle.Hash, size)
	for i := range size {
		leaves[i] = mustEntry(t, l, i).LeafHash
	}
	if mustRootAt(t, l, size) != rootOf(t, leaves) {
		t.Fatal("the reopened log's root is not the root of its entries")
	}
	cps, err := l.Checkpoints(0, size+1, 1000)
	if err != nil || len(cps) == 0 {
		t.Fatalf("checkpoints: %d, %v", len(cps), err)
	}
	for _, cp := range cps {
		if cp.Size > size || mustRootAt(t, l, cp.Size) != cp.Root {
			t.Fatalf("checkpoint signed at size %d (root %s) does not match the reopened log of %d", cp.Size, cp.Root, size)
		}
	}
	mustAppend(t, l, Entry{ID: "after", Payload: []byte("p")})
	t.Logf("%d entries acknowledged before the fault took the child down; %d after reopen; %d checkpoints match", len(acked), size, len(cps))
}

// walFailureChild appends from 8 clients to a store in dir whose WAL
// writes fail once 2,000 entries are acknowledged, printing "ACK id index"
// for each acknowledged entry and "FAULT" when the fault starts.
func walFailureChild(t *testing.T, dir string) {
	var failing atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.HasSuffix(op.Path, ".log") {
			switch op.Kind {
			case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
				return errorfs.ErrInjected
			}
		}
		return nil
	})
	keys := strings.Fields(os.Getenv("AUDITD_TEST_WAL_KEYS"))
	signer, err := note.NewSigner(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(keys[1])
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, signer, verifier, WithLogger(slog.New(slog.DiscardHandler)), WithMaxBatch(20), WithCheckpointInterval(5*time.Millisecond),
		func(o *options) { o.tune = func(po *pebble.Options) { po.FS = errorfs.Wrap(vfs.Default, inj) } })
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.CreateLog("wal")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		acked   int
		refused int
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(next.Add(1)) - 1
				es := make([]Entry, 10)
				for j := range es {
					es[j] = Entry{ID: fmt.Sprintf("w-%06d", b*10+j), Payload: []byte("p")}
				}
				res, err := l.Append(context.Background(), es)
				mu.Lock()
				if err != nil {
					refused++
					if refused == 1 {
						fmt.Printf("REFUSED %v\n", err)
					}
					stop := refused >= 50
					mu.Unlock()
					if stop {
						return
					}
					continue
				}
				var out strings.Builder
				for j, a := range res.Entries {
					fmt.Fprintf(&out, "ACK %s %d\n", es[j].ID, a.Index)
				}
				os.Stdout.WriteString(out.String())
				acked += len(res.Entries)
				if acked >= 2000 && !failing.Load() {
					os.Stdout.WriteString("FAULT\n")
					failing.Store(true)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("50 appends refused, no panic")
}

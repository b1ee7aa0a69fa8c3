package ledger

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
)

// A checkpoint whose file write stalls (a slow or hung disk) holds up no
// append: the signer stores and writes checkpoints beside the writer, and
// the checkpoint is published only once its file is written.
func TestSlowCheckpointFileDoesNotStallAppends(t *testing.T) {
	t.Parallel()
	s, v := newTestStore(t, WithCheckpointInterval(0))
	var armed atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall) // before the store closes, should the test fail
	s.cpFiles.beforeWrite = func(string) {
		if armed.Load() {
			entered <- struct{}{}
			<-release
		}
	}
	l := mustCreateLog(t, s, "slow")
	armed.Store(true)
	mustAppend(t, l, newEntries("a", 1)...)
	select {
	case <-entered: // the signer is writing the file of size 1, and hangs
	case <-time.After(30 * time.Second):
		t.Fatal("no checkpoint file write after an append")
	}
	armed.Store(false)
	for i := range 300 {
		// Each append is durable and acknowledged while the file write hangs.
		res, err := l.Append(testCtx(t, 10*time.Second), newEntries(fmt.Sprint("b", i), 3))
		if err != nil {
			t.Fatalf("append %d while a checkpoint file write hangs: %v", i, err)
		}
		if want := uint64(1 + 3*(i+1)); res.Size != want {
			t.Fatalf("append %d: size %d, want %d", i, res.Size, want)
		}
	}
	if cp := l.Checkpoint(); cp == nil || cp.Size != 0 {
		t.Fatalf("published checkpoint %v while its file write hangs; want the size-0 one", cp)
	}
	unstall()
	cp, err := l.WaitCheckpoint(testCtx(t, 30*time.Second), 901)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cpFile(s, "slow"))
	if err != nil {
		t.Fatal(err)
	}
	if fc, err := merkle.OpenCheckpoint(b, v, l.Origin()); err != nil || fc.Size < cp.Size {
		t.Errorf("checkpoint file holds %v (%v) behind the published size %d", fc.Size, err, cp.Size)
	}
}

package ledger

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// liveBytes is the memory the Go runtime holds for live objects and
// goroutine stacks, after a collection.
func liveBytes() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// memoryLogs is how many one-event logs the memory tests make.
const memoryLogs = 1000

// perLogBound is what a one-event log may cost in memory, all of it (the
// writer's state, its indexes and id filter, its goroutines' stacks, its
// metrics series). The id filter alone was 768 KiB a log.
const perLogBound = 64 << 10

// appendOneEach appends one event to each of n new logs, from a few
// goroutines at a time.
func appendOneEach(t *testing.T, s *Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				l, err := s.LogForAppend(fmt.Sprintf("log-%04d", i))
				if err == nil {
					_, err = l.Append(context.Background(), []Entry{{ID: fmt.Sprint("e-", i), Payload: []byte(`{}`), PayloadJSON: true}})
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A log of one event costs little memory: on its first append, and again
// once the store is opened again and has rebuilt its indexes.
func TestMemoryPerLog(t *testing.T) {
	s, _ := newTestStore(t)
	before := liveBytes()
	appendOneEach(t, s, memoryLogs)
	grown := int64(liveBytes()) - int64(before)
	t.Logf("%d one-event logs: %d bytes a log", memoryLogs, grown/memoryLogs)
	if grown/memoryLogs > perLogBound {
		t.Errorf("%d one-event logs took %d bytes of memory, %d a log; want under %d a log", memoryLogs, grown, grown/memoryLogs, perLogBound)
	}

	cfg := testConfig(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before = liveBytes()
	s = openTestStore(t, cfg)
	if n := len(s.Logs()); n != memoryLogs {
		t.Fatalf("reopened store holds %d logs, want %d", n, memoryLogs)
	}
	grown = int64(liveBytes()) - int64(before)
	// The flushes (the last one the open's, of the WAL) put the small
	// logs in shared tables: a table per log and kind was 2,700 tables
	// here, each synced, and 14 s to open.
	tables, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, level := range tables {
		n += len(level)
	}
	if n > 50 {
		t.Errorf("%d one-event logs are in %d tables, want a few", memoryLogs, n)
	}
	t.Logf("reopened with %d one-event logs: %d bytes a log", memoryLogs, grown/memoryLogs)
	if grown/memoryLogs > perLogBound {
		t.Errorf("reopening %d one-event logs took %d bytes of memory, %d a log; want under %d a log", memoryLogs, grown, grown/memoryLogs, perLogBound)
	}
}

package rederive

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDaemonNoSource: a derivation whose sources match no log is in state
// no_source, not pending, in its reports and in Jobs, run after run, with
// one warning in the log; once a matching log exists it runs normally.
func TestDaemonNoSource(t *testing.T) {
	t.Parallel()
	lg := newRTLedger(t)
	path := filepath.Join(t.TempDir(), "balances.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	r := NewRunner(LocalLedger{lg.store}, WithBucket(lg.bucket(t)), WithWorkers(2),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	reports := make(chan *Report, 8)
	d := NewDaemon(r, []Job{rtJob(t, rtSpec("bal", store.Config{File: &store.FileConfig{Path: path}}, "pay-*"))},
		WithOnReport(func(_ Job, rep *Report) { reports <- rep }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	next := func() *Report {
		t.Helper()
		select {
		case rep := <-reports:
			return rep
		case <-time.After(15 * time.Second):
			t.Fatal("no report")
			return nil
		}
	}
	const waiting = "no log matches sources [pay-*]"
	for i := range 3 {
		if i > 0 {
			if err := d.Trigger("bal", i == 2); err != nil {
				t.Fatal(err)
			}
		}
		rep := next()
		if rep.State != StateNoSource || rep.Waiting != waiting {
			t.Errorf("run %d: state %s, waiting %q; want %s, %q", i, rep.State, rep.Waiting, StateNoSource, waiting)
		}
		if jobs := d.Jobs(); len(jobs) != 1 || jobs[0].LastState != StateNoSource || jobs[0].Waiting != waiting {
			t.Errorf("run %d: Jobs %+v, want last_state no_source, waiting %q", i, jobs, waiting)
		}
	}
	const warning = "derivation matches no log"
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Errorf("%d warnings %q over 3 runs, want 1; log:\n%s", n, warning, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "sources=[pay-*]") {
		t.Errorf("the warning names neither its level nor the sources:\n%s", logs.String())
	}

	lg.append(t, "pay-1", rtTransfers(5, 10, 3, "acct-"))
	if err := d.Trigger("bal", false); err != nil {
		t.Fatal(err)
	}
	rep := next()
	if rep.State != StateDrift || rep.Waiting != "" || rep.Events == 0 || len(rep.Pins) != 1 || rep.Pins[0].Log != "pay-1" {
		t.Errorf("run over a matching log: state %s, waiting %q, %d events, pins %+v; want drift (the store is empty) over pay-1",
			rep.State, rep.Waiting, rep.Events, rep.Pins)
	}
	if jobs := d.Jobs(); jobs[0].LastState != StateDrift || jobs[0].Waiting != "" {
		t.Errorf("Jobs after a matching log: %+v", jobs)
	}
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Errorf("%d warnings after a matching log, want still 1", n)
	}
}

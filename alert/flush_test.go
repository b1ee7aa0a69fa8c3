package alert_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
)

// TestFlush: once Flush returns, every sink has been handed every
// notification queued before it, however slow the sink; after Close it
// fails with ErrClosed.
func TestFlush(t *testing.T) {
	t.Parallel()
	slow := newRecordingSink("slow")
	slow.ch = make(chan alert.Alert, 200)
	slow.fail = func(alert.Alert) error { time.Sleep(time.Millisecond); return nil } // a slow receiver, not a clock
	fast := newRecordingSink("fast")
	fast.ch = make(chan alert.Alert, 200)
	m, err := alert.NewManager(newMemKV(), alert.Options{Sinks: []alert.Sink{slow, fast}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if _, err := m.Fire(drift(fmt.Sprint(i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*recordingSink{slow, fast} {
		s.mu.Lock()
		got := len(s.got)
		s.mu.Unlock()
		if got != n {
			t.Errorf("sink %s has %d notifications after Flush, want %d", s.name, got, n)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); !errors.Is(err, alert.ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
}

package ledger

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLogStateRefusal: a log's refusal names its writer's failure before
// its being read-only, counts the store's storage failure as the log's
// own, and keeps the first read-only cause.
func TestLogStateRefusal(t *testing.T) {
	t.Parallel()
	var fatal atomic.Pointer[error]
	g := logState{fatal: &fatal}
	if st := g.state(); st.persisted || st.refusal() != nil {
		t.Fatalf("new log: %+v", st)
	}
	g.persisted.Store(true)
	g.setReadOnly("a", &IntegrityError{Log: "a", Index: -1, Kind: IntegrityFork, Detail: "first"})
	g.setReadOnly("a", &IntegrityError{Log: "a", Index: -1, Kind: IntegrityRollback, Detail: "second"})
	st := g.state()
	if !st.persisted || st.failed != nil || !errors.Is(st.refusal(), ErrReadOnly) || st.refusal() != st.readOnly {
		t.Fatalf("read-only: %+v", st)
	}
	if ro := st.readOnly.Error(); !strings.Contains(ro, "first") || strings.Contains(ro, "second") {
		t.Errorf("read-only cause %q, want the first only", ro)
	}
	storeErr := errors.New("storage failed")
	fatal.Store(&storeErr)
	if st := g.state(); st.failed != storeErr || st.refusal() != storeErr {
		t.Errorf("store failed: %+v", st)
	}
	logErr := errors.New("WAL sync failed")
	g.fail(logErr)
	if st := g.state(); st.failed != logErr || st.refusal() != logErr || st.readOnly == nil {
		t.Errorf("log failed: %+v", st)
	}
}

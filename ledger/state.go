package ledger

import (
	"fmt"
	"sync/atomic"
)

// logState holds a log's status flags. Each is set once, by whichever of
// the log's goroutines finds the cause, and read by all of them through
// state.
type logState struct {
	// persisted is set once the log's name and metadata are durable: by
	// CreateLog, or by the first commit of a log from LogForAppend.
	persisted atomic.Bool
	// failed is why the writer stopped (a WAL sync failed, or the state
	// did not reload after a failed commit).
	failed atomic.Pointer[error]
	// readOnly is set when the log contradicts a checkpoint it signed (see
	// admit) or is forked (Forked): it takes no appends and never signs.
	readOnly atomic.Pointer[error]
	// fatal is the store's: set once Pebble reported a fatal write error,
	// it stops every log.
	fatal *atomic.Pointer[error]
}

// logStatus is a log's status at one moment.
type logStatus struct {
	persisted bool
	failed    error // the log's writer stopped, or the store's storage failed
	readOnly  error // wraps ErrReadOnly
}

// state returns the log's status.
func (g *logState) state() logStatus {
	var st logStatus
	st.persisted = g.persisted.Load()
	if p := g.failed.Load(); p != nil {
		st.failed = *p
	} else if p := g.fatal.Load(); p != nil {
		st.failed = *p
	}
	if p := g.readOnly.Load(); p != nil {
		st.readOnly = *p
	}
	return st
}

// refusal returns why the log takes no appends: its writer failed or it is
// read-only.
func (st logStatus) refusal() error {
	if st.failed != nil {
		return st.failed
	}
	return st.readOnly
}

// fail records why the log's writer stopped.
func (g *logState) fail(err error) { g.failed.Store(&err) }

// setReadOnly stops the log's appends and signing for good; the first
// cause is the one kept.
func (g *logState) setReadOnly(log string, e *IntegrityError) {
	// Not %w: the log is read-only (503), the cause is reported apart.
	err := fmt.Errorf("%w: %s: %v", ErrReadOnly, log, e)
	g.readOnly.CompareAndSwap(nil, &err)
}

package main

import (
	"log/slog"
	"sync"

	"github.com/auditd/auditd/alert"
)

// spaceAlerts fires the alert storage/disk_full while the ledger refuses
// appends for lack of disk space, and resolves it once they resume. The
// ledger tells it from its disk space guard (ledger.WithDiskSpaceHandler),
// possibly while opening, before the alert manager exists; handle only
// keeps the latest state and wakes the goroutine start runs.
type spaceAlerts struct {
	logger *slog.Logger
	wake   alertWake
	mu     sync.Mutex
	err    error // the latest state: nil once appends resumed
	told   bool  // a state is waiting to be raised
}

func newSpaceAlerts(logger *slog.Logger) *spaceAlerts {
	return &spaceAlerts{logger: logger, wake: newAlertWake()}
}

// handle is the ledger's disk space handler.
func (a *spaceAlerts) handle(err error) {
	a.mu.Lock()
	a.err, a.told = err, true
	a.mu.Unlock()
	a.wake.poke()
}

// start raises the state the ledger told, now and on every change, through
// m; the returned stop ends the goroutine (call it before closing m).
func (a *spaceAlerts) start(m *alert.Manager) (stop func()) { return a.wake.run(m, a.flush) }

func (a *spaceAlerts) flush(m *alert.Manager) {
	a.mu.Lock()
	err, told := a.err, a.told
	a.told = false
	a.mu.Unlock()
	if !told {
		return
	}
	if err == nil {
		if _, firing := m.Get(alert.DiskFullID); firing {
			if rerr := m.Resolve(alert.DiskFullID); rerr != nil {
				a.logger.Error("disk full alert not resolved", "err", rerr)
			}
		}
		return
	}
	_, ferr := m.Fire(alert.DiskFull(err.Error()))
	if ferr != nil {
		a.logger.Error("disk full alert not raised", "err", ferr)
	}
}

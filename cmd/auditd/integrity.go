package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// integrityAlerts turns the ledger's integrity failures into alerts of kind
// integrity. The ledger reports some while it opens, before the alert
// manager exists (the manager keeps its state in the ledger), and calls the
// handler from its writers and read paths, which must not block on an
// alert write: failures are queued and raised by one goroutine once the
// manager is attached. The same failure reported again updates one alert
// (its id is integrity/<log>/<kind>).
type integrityAlerts struct {
	logger *slog.Logger
	queue  chan ledger.IntegrityError
	quit   chan struct{}
	once   sync.Once
}

func newIntegrityAlerts(logger *slog.Logger) *integrityAlerts {
	return &integrityAlerts{logger: logger, queue: make(chan ledger.IntegrityError, 1024), quit: make(chan struct{})}
}

// handle is the ledger's integrity handler.
func (a *integrityAlerts) handle(e *ledger.IntegrityError) {
	select {
	case a.queue <- *e:
	default:
		// The ledger has logged and counted it.
		a.logger.Error("integrity alert queue full; alert not raised", "log", e.Log, "kind", e.Kind)
	}
}

// attach raises the queued failures, and those that follow, on m until
// stop.
func (a *integrityAlerts) attach(m *alert.Manager) {
	a.once.Do(func() {
		go func() {
			for {
				select {
				case e := <-a.queue:
					raiseIntegrity(m, e, a.logger)
				case <-a.quit:
					return
				}
			}
		}()
	})
}

// stop ends attach's goroutine; failures still queued are not raised.
func (a *integrityAlerts) stop() { close(a.quit) }

func raiseIntegrity(m *alert.Manager, e ledger.IntegrityError, logger *slog.Logger) {
	d, _ := json.Marshal(map[string]any{"log": e.Log, "kind": e.Kind, "index": e.Index, "detail": e.Detail})
	what := fmt.Sprintf("log %s: %s", e.Log, e.Kind)
	if e.Index >= 0 {
		what = fmt.Sprintf("log %s entry %d: %s", e.Log, e.Index, e.Kind)
	}
	_, err := m.Fire(alert.Alert{ID: "integrity/" + e.Log + "/" + e.Kind, Kind: alert.KindIntegrity, Subject: e.Log,
		Labels:  map[string]string{"log": e.Log, "violation": e.Kind},
		Summary: what + ": " + e.Detail, Details: d})
	if err != nil {
		logger.Error("integrity alert not raised", "log", e.Log, "kind", e.Kind, "err", err)
	}
}

package main

import (
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// integrityAlerts raises an alert of kind integrity for the integrity
// failures the ledger reports (ledger.WithIntegrityHandler). The ledger
// calls the handler from the goroutine that found the failure, which must
// not block, and may call it before the alert manager exists (the checks
// of ledger.Open), so handle only keeps the latest failure per alert and
// wakes a goroutine that fires them once start has been given the manager.
// One alert per log and kind, "integrity/<log>/<kind>": repeats update it
// instead of flooding. Safe for concurrent use.
type integrityAlerts struct {
	logger  *slog.Logger
	wake    alertWake
	mu      sync.Mutex
	pending map[string]ledger.IntegrityError // by alert id; bounded by logs × kinds
}

func newIntegrityAlerts(logger *slog.Logger) *integrityAlerts {
	return &integrityAlerts{logger: logger, wake: newAlertWake(), pending: map[string]ledger.IntegrityError{}}
}

// handle is the ledger's integrity handler.
func (a *integrityAlerts) handle(e *ledger.IntegrityError) {
	a.mu.Lock()
	a.pending[alert.LogViolation(e.Log, e.Kind, "", nil).ID] = *e
	a.mu.Unlock()
	a.wake.poke()
}

// start fires what is pending, then every later failure, through m. The
// returned stop fires what is left and returns once the goroutine ended;
// call it before closing m.
func (a *integrityAlerts) start(m *alert.Manager) (stop func()) { return a.wake.run(m, a.flush) }

// alertWake is the goroutine of a raiser the ledger tells from goroutines
// that must not block, possibly before the alert manager exists: the
// raiser keeps what it was told and pokes; run flushes it through the
// manager at start, on every poke, and once more at stop.
type alertWake chan struct{}

func newAlertWake() alertWake { return make(alertWake, 1) }

// poke wakes the goroutine; it never blocks (a pending poke covers this
// one).
func (w alertWake) poke() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// run starts the goroutine; the returned stop flushes what is left and
// returns once it ended (call it before closing m).
func (w alertWake) run(m *alert.Manager, flush func(*alert.Manager)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			flush(m)
			select {
			case <-w:
			case <-quit:
				flush(m)
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

func (a *integrityAlerts) flush(m *alert.Manager) {
	a.mu.Lock()
	batch := a.pending
	a.pending = map[string]ledger.IntegrityError{}
	a.mu.Unlock()
	for _, e := range batch {
		d, _ := json.Marshal(map[string]any{"log": e.Log, "kind": e.Kind, "index": e.Index, "detail": e.Detail})
		_, err := m.Fire(alert.LogViolation(e.Log, e.Kind, e.Error(), d))
		if err != nil {
			a.logger.Error("integrity alert not raised", "log", e.Log, "kind", e.Kind, "err", err)
		}
	}
}

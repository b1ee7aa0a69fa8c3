// Package fold is the pure derivation engine: a Derivation folds the
// entries of pinned ledger prefixes (Spans) into per-key State, in
// parallel and deterministically, giving a Result bound to the Pins it was
// computed at. Lineage names the entries behind a key's state, and
// SaveResult and LoadResult persist a Result so the next fold continues
// from it.
//
// A derivation sees only the event and the key's prior state: no clock,
// no randomness, no I/O, so its result is a pure function of the ledger
// prefix it ran over. Derivations come from YAML and CEL (packages spec
// and cel) or are written in Go by implementing Derivation.
package fold

import (
	"context"
	"errors"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Event is one ledger entry as a derivation sees it.
type Event struct {
	Log     string
	Index   uint64
	ID      string
	HasKey  bool
	Key     []byte
	Time    time.Time
	Source  *merkle.Source
	Payload []byte

	ctx context.Context // the fold's; nil: context.Background
}

// Context is the context of the fold that reads the event: it ends when
// the fold is cancelled or fails, so that a derivation can stop an
// evaluation that runs long. It is never nil (context.Background for an
// Event made outside a fold).
func (e *Event) Context() context.Context {
	if e.ctx == nil {
		return context.Background()
	}
	return e.ctx
}

// State is a derivation's state for one key. Its concrete type belongs to
// the Derivation that made it; the engine only passes it back.
type State any

// Derivation is a compiled derivation: a fold from events to per-key state.
//
// Implementations must be deterministic: the same events in the same order
// give the same states, with no clock, randomness or I/O. Prepare is called
// concurrently from several goroutines; Initial, Step, Encode, Decode and
// Export are called concurrently for different keys, never for the same key
// at once.
type Derivation interface {
	// Name identifies the derivation (metrics, reports, storage).
	Name() string
	// Sources are the log names or path.Match patterns the derivation
	// folds.
	Sources() []string
	// Prepare decodes and filters an event. It returns the keys the event
	// updates (none: the event does not apply) and a decoded form handed to
	// Step for each key. An error is a derivation error on that event.
	//
	// An event that applies to every key (a table truncated, a reset)
	// returns no keys and an AllKeys as its decoded form.
	Prepare(ev *Event) (keys []string, decoded any, err error)
	// Initial returns a key's state before its first event.
	Initial(key string) (State, error)
	// Step applies one event to one key's state.
	Step(state State, decoded any, ev *Event, key string) (State, error)
	// Export renders a state as a JSON-like Go value (nil, bool, string,
	// int64, float64, json.Number, []any, map[string]any, and time.Time
	// for an instant) for comparison and reports.
	Export(state State) (any, error)
	// Encode and Decode persist a state exactly (types included), so an
	// incremental fold resumes from the same state a full fold would hold.
	Encode(state State) ([]byte, error)
	Decode(b []byte) (State, error)
}

// KeyExporter is implemented by a Derivation whose exported value depends
// on the key as well as the state (a spec's value: projection that reads
// key). ExportKey renders key's state as Export does.
type KeyExporter interface {
	ExportKey(key string, state State) (any, error)
}

// Export renders key's state for comparison and reports: with
// d.ExportKey when d implements KeyExporter, else with d.Export. Callers
// that have the key use it rather than d.Export.
func Export(d Derivation, key string, state State) (any, error) {
	if ke, ok := d.(KeyExporter); ok {
		return ke.ExportKey(key, state)
	}
	return d.Export(state)
}

// AllKeys is the decoded form Prepare returns, with no keys, for an event
// that applies to every key: Fold then calls Step, with this AllKeys as
// the decoded form, for every key that holds a state at the event's
// position in the fold (base's keys and those earlier events made), and
// for no key that gets its first state after it. The event is a barrier
// in the order Fold applies events (see Fold): for each key it comes
// after every event applied before it and before every event after it,
// whatever Workers. It counts as the newest entry of each key it steps
// when it is the newest by Result.Newest's rule, and appears in their
// Lineage.
type AllKeys struct {
	// Decoded is the derivation's own decoded form of the event.
	Decoded any
}

// LogReader reads a pinned source log for the engine.
type LogReader interface {
	// Name is the log's name.
	Name() string
	// Entries calls fn with the entries [from, to) in index order. fn must
	// not keep the record after it returns.
	Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error
}

// Pin is the checkpoint of one source log a result was computed at.
type Pin struct {
	Log  string      `json:"log"`
	Size uint64      `json:"size"`
	Root merkle.Hash `json:"root"`
	// Checkpoint is the signed note, when the pin came from one.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// EventError is a derivation error on one event.
type EventError struct {
	Log   string `json:"log"`
	Index uint64 `json:"index"`
	Key   string `json:"key,omitempty"`
	Err   string `json:"error"`
}

// ErrPayloadPruned is wrapped by the error of a fold that reads an entry
// whose payload retention pruned: it folds from a snapshot past the
// pruned range instead (package rederive).
var ErrPayloadPruned = errors.New("payload pruned after retention")

// ErrBudget is returned when a fold's derivation errors exceed its error
// budget.
var ErrBudget = errors.New("rederive: error budget exceeded")

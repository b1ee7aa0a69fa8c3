package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// Snapshots is what the API needs to publish derivations' snapshots, a
// part of Derivations.
type Snapshots interface {
	// Snapshot returns the named derivation's newest snapshot: an error
	// wrapping rederive.ErrUnknownDerivation for no such derivation,
	// ledger.ErrNotFound when it has none, or ErrNoSnapshots when the
	// implementation keeps no snapshots at all.
	Snapshot(name string) (*rederive.Snapshot, error)
}

// ErrNoSnapshots is what Snapshots.Snapshot returns from an
// implementation that keeps no snapshots: the API answers 404 no_snapshot,
// "this auditd keeps no snapshots".
var ErrNoSnapshots = errors.New("api: this auditd keeps no snapshots")

var _ Snapshots = (*rederive.Daemon)(nil)

// snapshot serves GET /v1/derivations/{name}/snapshot: the snapshot's
// header, its signed note and its state (docs/api.md).
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	d, ok := s.derivations(w)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	snap, err := d.Snapshot(name)
	switch {
	case errors.Is(err, ErrNoSnapshots):
		writeError(w, http.StatusNotFound, "no_snapshot", "this auditd keeps no snapshots", nil)
	case errors.Is(err, rederive.ErrUnknownDerivation):
		writeError(w, http.StatusNotFound, "unknown_derivation", "no derivation named "+strconv.Quote(name), nil)
	case errors.Is(err, ledger.ErrNotFound):
		writeError(w, http.StatusNotFound, "no_snapshot", "derivation "+strconv.Quote(name)+" has no snapshot (one is made before its sources are pruned)", nil)
	case err != nil:
		s.writeErr(w, r, err)
	default:
		writeJSON(w, http.StatusOK, snap)
	}
}

package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/rederive"
)

// Derivations is what the API needs of the derivation daemon. Its
// methods are called concurrently.
type Derivations interface {
	// Configured reports whether any derivation is configured now. A set
	// that can change while the server runs (serve's, on a configuration
	// reload) says none for now with false: /v1/derivations then answers
	// 404 no_derivations.
	Configured() bool
	// Jobs lists the derivations.
	Jobs() []rederive.JobInfo
	// Latest returns the named derivation's latest report (nil before its
	// first run), or an error wrapping rederive.ErrUnknownDerivation.
	Latest(name string) (*rederive.Report, error)
	// Trigger queues a run of the named derivation (full: from zero), or
	// returns an error wrapping rederive.ErrUnknownDerivation.
	Trigger(name string, full bool) error
	Snapshots
}

var _ Derivations = (*rederive.Daemon)(nil)

// derivationRoutes serves /v1/derivations: the configured derivations,
// their latest reports, and on-demand runs.
func (s *Server) derivationRoutes(r chi.Router) {
	r.With(s.auth(false)).Get("/", s.listDerivations)
	r.With(s.auth(false)).Get("/{name}/runs/latest", s.latestRun)
	r.With(s.auth(false)).Get("/{name}/snapshot", s.snapshot) // snapshots.go
	r.With(s.auth(true)).Post("/{name}/run", s.triggerRun)
}

func (s *Server) derivations(w http.ResponseWriter) (Derivations, bool) {
	if d := s.parts.Derivations; d == nil || !d.Configured() {
		writeError(w, http.StatusNotFound, "no_derivations", "this auditd checks no derivations (configure derivations: spec files)", nil)
		return nil, false
	}
	return s.parts.Derivations, true
}

func (s *Server) listDerivations(w http.ResponseWriter, r *http.Request) {
	d, ok := s.derivations(w)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"derivations": d.Jobs()})
}

func (s *Server) latestRun(w http.ResponseWriter, r *http.Request) {
	d, ok := s.derivations(w)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	rep, err := d.Latest(name)
	switch {
	case errors.Is(err, rederive.ErrUnknownDerivation):
		writeError(w, http.StatusNotFound, "unknown_derivation", "no derivation named "+strconv.Quote(name), nil)
	case err != nil:
		s.writeErr(w, r, err)
	case rep == nil:
		writeError(w, http.StatusNotFound, "no_run_yet", "derivation "+strconv.Quote(name)+" has not run yet", nil)
	default:
		writeJSON(w, http.StatusOK, rep)
	}
}

// triggerRun queues a run (?full=true folds from zero) and answers 202; the
// report appears at runs/latest when it is done.
func (s *Server) triggerRun(w http.ResponseWriter, r *http.Request) {
	d, ok := s.derivations(w)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	full := false
	if v := r.URL.Query().Get("full"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_parameter", "full: want true or false", nil)
			return
		}
		full = b
	}
	if err := d.Trigger(name, full); errors.Is(err, rederive.ErrUnknownDerivation) {
		writeError(w, http.StatusNotFound, "unknown_derivation", "no derivation named "+strconv.Quote(name), nil)
		return
	} else if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"derivation": name, "full": full, "status": "queued",
		"report": "/v1/derivations/" + name + "/runs/latest"})
}

package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/checkers"
)

// Checks is what the API needs of the self-audit runner.
type Checks interface {
	// Status reports every checker, by name.
	Status() []checkers.Status
	// Trigger queues a pass of the named checker; an unknown name is an
	// error wrapping checkers.ErrUnknownChecker.
	Trigger(name string) error
}

var _ Checks = (*checkers.Runner)(nil)

// checkRoutes serves /v1/checks: the self-audit checkers, their last pass
// and findings, and on-demand passes.
//
//	GET  /              every checker
//	GET  /{name}        one checker
//	POST /{name}/run    queue a pass (202)
func (s *Server) checkRoutes(r chi.Router) {
	r.With(s.auth(false)).Get("/", s.listChecks)
	r.With(s.auth(false)).Get("/{name}", s.getCheck)
	r.With(s.auth(true)).Post("/{name}/run", s.runCheck)
}

func (s *Server) checks(w http.ResponseWriter) (Checks, bool) {
	if s.parts.Checks == nil {
		writeError(w, http.StatusNotFound, "checks_disabled", "self-audit checks are not enabled on this server", nil)
		return nil, false
	}
	return s.parts.Checks, true
}

func (s *Server) listChecks(w http.ResponseWriter, r *http.Request) {
	c, ok := s.checks(w)
	if !ok {
		return
	}
	st := c.Status()
	if st == nil {
		st = []checkers.Status{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"checks": st})
}

func (s *Server) getCheck(w http.ResponseWriter, r *http.Request) {
	c, ok := s.checks(w)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	for _, st := range c.Status() {
		if st.Name == name {
			writeJSON(w, http.StatusOK, st)
			return
		}
	}
	writeError(w, http.StatusNotFound, "unknown_check", "no checker named "+strconv.Quote(name), nil)
}

// runCheck queues a pass and answers 202; GET /v1/checks/{name} shows it
// running, then its result.
func (s *Server) runCheck(w http.ResponseWriter, r *http.Request) {
	c, ok := s.checks(w)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	if err := c.Trigger(name); errors.Is(err, checkers.ErrUnknownChecker) {
		writeError(w, http.StatusNotFound, "unknown_check", "no checker named "+strconv.Quote(name), nil)
		return
	} else if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"check": name, "status": "queued", "status_url": "/v1/checks/" + name})
}

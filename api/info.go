package api

import (
	"net/http"
	"time"
)

// Info is what GET /v1/info says about the running daemon: its build, the
// origin prefix of its logs' checkpoints, and when it started.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Dirty     bool   `json:"dirty"`
	GoVersion string `json:"go_version"`
	// Origin is the name of the checkpoint signing key: log L's
	// checkpoints carry the origin Origin/L.
	Origin    string    `json:"origin"`
	StartedAt time.Time `json:"started_at"`
}

// SetInfo sets what GET /v1/info serves (until it is set the route
// answers 404).
func (s *Server) SetInfo(in Info) { s.info.Store(&in) }

func (s *Server) getInfo(w http.ResponseWriter, r *http.Request) {
	in := s.info.Load()
	if in == nil {
		writeError(w, http.StatusNotFound, "no_info", "this server does not describe itself", nil)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Info
		Uptime float64 `json:"uptime_seconds"`
	}{*in, time.Since(in.StartedAt).Seconds()})
}

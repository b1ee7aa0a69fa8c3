package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/alert"
)

// alertRoutes serves the alerts under /v1/alerts:
//
//	GET /             the alerts, filtered (?state, ?kind, ?subject, ?limit)
//	GET /stream       server-sent events: the firing alerts, then each change
//	GET /{id...}      one alert; the id is the rest of the path, slashes
//	                  included (each element may be percent-encoded)
//
// An alert id is never "stream" (alert.ValidID), so the routes do not
// overlap.
func (s *Server) alertRoutes(r chi.Router) {
	r.Get("/", s.listAlerts)
	r.Get("/stream", s.streamAlerts)
	r.Get("/*", s.getAlert)
}

// alerts returns the alert manager, or writes a 404 if there is none.
func (s *Server) alerts(w http.ResponseWriter) (Alerts, bool) {
	if s.parts.Alerts == nil {
		writeError(w, http.StatusNotFound, "alerts_disabled", "alerts are not enabled on this server", nil)
		return nil, false
	}
	return s.parts.Alerts, true
}

func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request) {
	m, ok := s.alerts(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := alert.Filter{State: alert.State(q.Get("state")), Kind: alert.Kind(q.Get("kind")), Subject: q.Get("subject")}
	if f.State != "" && !f.State.Valid() {
		s.badParam(w, fmt.Errorf("state=%q: want firing or resolved", f.State))
		return
	}
	if f.Kind != "" && !f.Kind.Valid() {
		s.badParam(w, fmt.Errorf("kind=%q: want one of %v", f.Kind, alert.Kinds))
		return
	}
	limit, err := optUint(q.Get("limit"), "limit", 100)
	if err != nil || limit == 0 || limit > 1000 {
		s.badParam(w, errors.New("limit must be 1..1000"))
		return
	}
	f.Limit = int(limit)
	writeJSON(w, http.StatusOK, map[string][]alert.Alert{"alerts": m.List(f)})
}

func (s *Server) getAlert(w http.ResponseWriter, r *http.Request) {
	m, ok := s.alerts(w)
	if !ok {
		return
	}
	id := chi.URLParam(r, "*")
	if r.URL.RawPath != "" {
		// chi routes on the escaped path when there is one.
		var err error
		if id, err = url.PathUnescape(id); err != nil {
			s.badParam(w, fmt.Errorf("alert id: %v", err))
			return
		}
	}
	a, found := m.Get(id)
	if !found {
		writeError(w, http.StatusNotFound, "alert_not_found", fmt.Sprintf("no alert %q", id), nil)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// streamAlerts serves text/event-stream: every firing alert, then every
// change, each as "id: <seq>\nevent: alert\ndata: <json>\n\n", with a
// comment line every Limits.StreamKeepalive. It ends when the client goes, the
// alert manager closes, or this stream falls too far behind (the client's
// EventSource then reconnects and gets a fresh snapshot).
func (s *Server) streamAlerts(w http.ResponseWriter, r *http.Request) {
	m, ok := s.alerts(w)
	if !ok {
		return
	}
	if !s.openStream(w) {
		return
	}
	defer s.closeStream()
	// Subscribe first: once the client has the headers, no change is lost.
	ctx := r.Context()
	events, cancel := m.Subscribe(ctx)
	defer cancel()
	rc := http.NewResponseController(w)
	// A stream outlives any server write timeout.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.log.Warn("alert stream cannot flush", "err", err)
		return
	}
	keepalive := time.NewTicker(s.limits.StreamKeepalive)
	defer keepalive.Stop()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for {
		buf.Reset()
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			buf.WriteString(": keepalive\n\n")
		case a, ok := <-events:
			if !ok {
				return
			}
			fmt.Fprintf(&buf, "id: %d\nevent: alert\ndata: ", a.Seq)
			if err := enc.Encode(a); err != nil { // one line: encoding/json compacts Details
				s.log.Error("alert stream: encode", "alert", a.ID, "err", err)
				return
			}
			buf.WriteString("\n")
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// openStream takes one of the MaxStreams places of the event streams, or
// answers 503 too_many_streams (with a Retry-After) and reports false.
func (s *Server) openStream(w http.ResponseWriter) bool {
	select {
	case s.streams <- struct{}{}:
		return true
	default:
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, "too_many_streams",
			fmt.Sprintf("the server has %d event streams open, its maximum (max_streams); retry later", cap(s.streams)),
			map[string]any{"limit": cap(s.streams)})
		return false
	}
}

func (s *Server) closeStream() { <-s.streams }

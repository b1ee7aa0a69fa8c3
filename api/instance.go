package api

import (
	"net/http"

	"github.com/auditd/auditd/checkers"
)

// WithInstance returns h answering every request with the headers that
// name the instance: Auditd-Instance, its data directory's identity, and
// Auditd-Instance-Run, its run's (checkers.InstanceHeader and
// checkers.InstanceRunHeader). A peer cross-check reads them to tell this
// instance from another that signs the same logs with the same key, and
// to skip itself when it is its own peer (checkers.WithInstance). With no
// identity (in.ID empty) it returns h.
func WithInstance(h http.Handler, in checkers.Instance) http.Handler {
	if in.ID == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(checkers.InstanceHeader, in.ID)
		w.Header().Set(checkers.InstanceRunHeader, in.Run)
		h.ServeHTTP(w, r)
	})
}

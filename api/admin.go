package api

import (
	"context"
	"io"
	"net/http"
)

// SetTokens replaces the write and read bearer tokens (see Tokens) for the
// requests that arrive from now on; "" turns a token off. A configuration
// reload calls it.
func (s *Server) SetTokens(write, read string) { s.SetAuth(Tokens{Write: write, Read: read}) }

// Admin are the operator's endpoints under /-/, as Prometheus names its
// own: both need the write token (or, with only a read token set, the read
// token, as every write does).
type Admin struct {
	// Reload, if set, serves POST /-/reload: it loads the configuration
	// again and applies it, or refuses it whole. Its summary is the
	// answer's "reloaded"; its error, the answer's "error" (400,
	// "reload_refused"): the file, line and key at fault.
	Reload func(ctx context.Context) (summary string, err error)
	// Backup, if set, serves GET /-/backup: it writes a backup of the
	// ledger to w as it is taken (application/gzip). An error before the
	// first byte is a 500; after it, the stream ends short and the client,
	// which checks the archive to its end, refuses it.
	Backup func(ctx context.Context, w io.Writer) error
}

// WithAdmin returns s with the endpoints of a added: POST /-/reload and
// GET /-/backup, behind the write token. Other paths go to s.
func (s *Server) WithAdmin(a Admin) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var method string
		switch {
		case r.URL.Path == "/-/reload" && a.Reload != nil:
			method = http.MethodPost
		case r.URL.Path == "/-/backup" && a.Backup != nil:
			method = http.MethodGet
		default:
			s.ServeHTTP(w, r)
			return
		}
		boundBody(w, r, s.limits.BodyTimeout)
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path, nil)
			return
		}
		if !s.currentAuth().Allow(r, true) {
			s.unauthorized(w)
			return
		}
		if method == http.MethodPost {
			summary, err := a.Reload(r.Context())
			if err != nil {
				s.log.Warn("configuration reload refused (POST /-/reload)", "err", err)
				writeError(w, http.StatusBadRequest, "reload_refused", err.Error(), nil)
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"status": "reloaded", "reloaded": summary})
			return
		}
		s.serveBackup(w, r, a.Backup)
	})
}

// serveBackup streams a backup; see Admin.Backup.
func (s *Server) serveBackup(w http.ResponseWriter, r *http.Request, backup func(context.Context, io.Writer) error) {
	sw := &startWriter{w: w}
	err := backup(r.Context(), sw)
	switch {
	case err != nil && !sw.started:
		s.log.Error("backup failed", "err", err)
		writeError(w, http.StatusInternalServerError, "backup_failed", err.Error(), nil)
	case err != nil:
		s.log.Error("backup failed while it was being sent: the client gets a short archive and refuses it", "err", err, "bytes_sent", sw.n)
	default:
		s.log.Info("backup sent", "bytes", sw.n)
	}
}

// startWriter sends the backup's headers with its first byte, so that an
// error before it can still be an error status.
type startWriter struct {
	w       http.ResponseWriter
	started bool
	n       int64
}

func (sw *startWriter) Write(p []byte) (int, error) {
	if !sw.started {
		sw.started = true
		sw.w.Header().Set("Content-Type", "application/gzip")
		sw.w.Header().Set("Content-Disposition", `attachment; filename="auditd-backup.tar.gz"`)
		sw.w.Header().Set("Cache-Control", "no-store")
		sw.w.WriteHeader(http.StatusOK)
	}
	n, err := sw.w.Write(p)
	sw.n += int64(n)
	return n, err
}

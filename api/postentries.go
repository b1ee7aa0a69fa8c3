package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// POST /v1/logs/{log}/entries is the one route hit once per event by
// producers that send events one at a time, so it skips the router: a
// request chi would route to it (POST, an unescaped path, exactly that
// shape) is served by servePostEntries, which does what the router's
// middleware does for it (recover, instrument, auth) with the metric
// observers looked up once. Every other request, including a POST to an
// escaped path, goes through chi, which routes the same POST there too.

// entriesRoute is the route pattern of POST entries, as chi names it in
// the http_requests_total and http_request_duration_seconds labels.
const entriesRoute = "/v1/logs/{log}/entries"

// entriesPath returns the log of a POST chi would route to postEntries.
func entriesPath(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost || r.URL.RawPath != "" {
		return "", false
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/v1/logs/")
	if !ok {
		return "", false
	}
	if name, ok = strings.CutSuffix(name, "/entries"); !ok || name == "" || strings.IndexByte(name, '/') >= 0 {
		return "", false
	}
	return name, true
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// servePostEntries serves POST /v1/logs/{name}/entries as the router
// would: panics answer 500 (middleware.Recoverer), the request is counted
// and timed under entriesRoute (instrument), and the write token checked
// (auth).
func (s *Server) servePostEntries(w http.ResponseWriter, r *http.Request, name string) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if rvr := recover(); rvr != nil {
			if rvr == http.ErrAbortHandler {
				panic(rvr)
			}
			s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", rvr, "stack", string(debug.Stack()))
			if r.Header.Get("Connection") != "Upgrade" {
				sw.WriteHeader(http.StatusInternalServerError)
			}
		}
		s.countPost(sw.code, time.Since(start))
	}()
	if !s.authorized(r, true) {
		s.unauthorized(sw)
		return
	}
	s.postEntriesTo(sw, r, name)
}

// countPost counts and times a POST entries request.
func (s *Server) countPost(code int, d time.Duration) {
	if code == 0 {
		code = http.StatusOK
	}
	if code == http.StatusOK {
		s.postOK.Inc()
	} else {
		s.requests.WithLabelValues(entriesRoute, http.MethodPost, statusText(code)).Inc()
	}
	s.postDuration.Observe(d.Seconds())
}

func (s *Server) postEntries(w http.ResponseWriter, r *http.Request) {
	s.postEntriesTo(w, r, chi.URLParam(r, "log"))
}

type appendedOut struct {
	Index          uint64        `json:"index"`
	ID             string        `json:"id"`
	LeafHash       merkle.Hash   `json:"leaf_hash"`
	Duplicate      bool          `json:"duplicate"`
	InclusionProof []merkle.Hash `json:"inclusion_proof,omitzero"` // [] for a one-entry tree
}

type appendOut struct {
	Size       uint64        `json:"size"`
	Entries    []appendedOut `json:"entries"`
	Checkpoint string        `json:"checkpoint,omitempty"`
}

func (s *Server) postEntriesTo(w http.ResponseWriter, r *http.Request, name string) {
	var wait string
	if r.URL.RawQuery != "" {
		wait = r.URL.Query().Get("wait")
	}
	if wait != "" && wait != "checkpoint" {
		writeError(w, http.StatusBadRequest, "invalid_parameter", fmt.Sprintf("wait=%s: the only value is \"checkpoint\"", echo(wait)), nil)
		return
	}
	l, err := s.store.Log(name)
	if errors.Is(err, ledger.ErrLogNotFound) && s.opts.CreateLogs {
		err = nil // made after the body decodes
		if !ledger.ValidLogName(name) {
			err = fmt.Errorf("%w: %q", ledger.ErrLogName, name)
		}
	}
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if l == nil && s.tooManyLogs(w) {
		return
	}
	if l != nil && l.SourcePosition() != nil {
		// One entry per source offset: a log a Kafka partition feeds takes
		// nothing else.
		writeError(w, http.StatusConflict, "source_log", fmt.Sprintf("log %s is fed by a Kafka partition; it takes no entries over HTTP", name), nil)
		return
	}
	var adm admission
	if !s.admitWrite(w, r, &adm) {
		return
	}
	defer adm.release()
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)}
	entries, err := ingest.Decode(body, ingest.Limits{MaxEvents: s.opts.MaxEvents, MaxPayload: s.opts.MaxPayloadBytes})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	// The body is read: its write slot goes to the next POST, its bytes
	// and events stay counted until the entries are in the ledger.
	adm.decoded(body.n, len(entries))
	bodyRead(w)
	if l == nil {
		// The log comes into existence with its first successful append:
		// a refused request leaves no trace. The ledger counts the logs
		// being created too, so that concurrent POSTs to new names do not
		// pass MaxLogs together.
		if l, err = s.store.LogForAppendMax(name, s.opts.MaxLogs); err != nil {
			var many *ledger.TooManyLogsError
			if errors.As(err, &many) {
				writeTooManyLogs(w, many.Logs, many.Max)
				return
			}
			s.writeErr(w, r, err)
			return
		}
	}
	res, err := l.Append(r.Context(), entries)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	adm.release() // the body is in the ledger; waiting for a checkpoint holds nothing
	out := appendOut{Size: res.Size, Entries: make([]appendedOut, len(res.Entries))}
	for i, a := range res.Entries {
		out.Entries[i] = appendedOut{Index: a.Index, ID: a.ID, LeafHash: a.LeafHash, Duplicate: a.Duplicate}
	}
	if wait == "checkpoint" && !s.addProofs(w, r, l, &out) {
		return
	}
	writeAppended(w, &out)
}

// addProofs waits for the checkpoint covering out's entries and adds it
// and their inclusion proofs to out. It reports false with the answer
// written when there is none in time or a proof does not verify.
func (s *Server) addProofs(w http.ResponseWriter, r *http.Request, l *ledger.Log, out *appendOut) bool {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WaitTimeout)
	defer cancel()
	cp, err := l.WaitCheckpoint(ctx, out.Size)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "checkpoint_timeout",
			"entries are durable but no checkpoint covered them in time: "+err.Error(),
			map[string]any{"size": out.Size, "entries": out.Entries})
		return false
	}
	out.Checkpoint = string(cp.Note)
	for i := range out.Entries {
		e := &out.Entries[i]
		// Verified against the root the log vouches for (the checkpoint
		// just served): a stored hash on the path that was altered is an
		// integrity error, never a wrong proof.
		leaf, p, err := l.VerifiedLeafInclusion(e.Index, cp.Size)
		if err != nil {
			s.writeErr(w, r, err)
			return false
		}
		if leaf != e.LeafHash {
			s.writeErr(w, r, fmt.Errorf("ledger: %s: leaf %d of the tree is %s, the append gave %s", l.Name(), e.Index, leaf, e.LeafHash))
			return false
		}
		e.InclusionProof = p
	}
	return true
}

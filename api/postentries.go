package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

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

// postEntries serves POST /v1/logs/{log}/entries, routed by chi or taken
// before the router (chain.go).
func (s *Server) postEntries(w http.ResponseWriter, r *http.Request) {
	var name string
	if rc := chi.RouteContext(r.Context()); rc != nil {
		name = rc.URLParam("log")
	} else {
		name, _ = entriesPath(r)
	}
	s.postEntriesTo(w, r, name)
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
	if errors.Is(err, ledger.ErrLogNotFound) && s.limits.CreateLogs {
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
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, s.limits.MaxBodyBytes)}
	entries, err := ingest.Decode(body, ingest.Limits{MaxEvents: s.limits.MaxEvents, MaxPayload: s.limits.MaxPayloadBytes})
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
		if l, err = s.store.LogForAppendMax(name, s.limits.MaxLogs); err != nil {
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
	ctx, cancel := context.WithTimeout(r.Context(), s.limits.WaitTimeout)
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

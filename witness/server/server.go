// Package server is auditd's witness: the c2sp.org/tlog-witness
// add-checkpoint endpoint, which verifies a log's checkpoint and its
// consistency with the last one it cosigned for that log, keeps the
// per-log state durably, and answers with its cosignature/v1
// cosignature.
package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/witness"
)

// Log is a log the witness cosigns for: its checkpoint origin and the
// verifier key its checkpoints are signed with.
type Log struct {
	Origin   string
	Verifier note.Verifier
}

// Store keeps the witness's state. Get returns a copy of the value of key
// or an error wrapping ledger.ErrNotFound; Set stores it durably before it
// returns. *ledger.Bucket implements it.
type Store interface {
	Get(key []byte) ([]byte, error)
	Set(key, value []byte) error
}

var _ Store = (*ledger.Bucket)(nil)

// Errors AddCheckpoint returns, one per status the spec prescribes
// (besides witness.ErrMalformed, 400, and *ConflictError, 409).
var (
	ErrUnknownOrigin = errors.New("witness: unknown log origin")                            // 404
	ErrBadSignature  = errors.New("witness: checkpoint not signed by the log's key")        // 403
	ErrBadProof      = errors.New("witness: consistency proof does not verify")             // 422
	ErrOldSize       = errors.New("witness: old size is larger than the checkpoint's size") // 400
)

// ConflictError is a 409, with Known (the size the witness last cosigned
// for the log) in the body: the old size of a request is not Known, or
// (OtherRoot) the checkpoint is of size Known but not the one the witness
// cosigned at that size.
type ConflictError struct {
	Known     uint64
	OtherRoot bool
}

func (e *ConflictError) Error() string {
	if e.OtherRoot {
		return fmt.Sprintf("witness: the checkpoint of size %d has another root than the one cosigned at that size", e.Known)
	}
	return fmt.Sprintf("witness: old size does not match the known size %d", e.Known)
}

// MaxBodyBytes bounds an add-checkpoint body.
const MaxBodyBytes = 64 << 10

// Server is the witness. Its handler answers POST /add-checkpoint.
type Server struct {
	store   Store
	signer  note.Signer
	logs    map[string]note.Verifier
	log     *slog.Logger
	mu      sync.Mutex // serializes the check and update of a log's state
	results *prometheus.CounterVec
}

// New returns a witness cosigning with signer (a witness.Cosigner) for
// logs, keeping its state in store.
func New(store Store, signer note.Signer, logs []Log, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{store: store, signer: signer, logs: map[string]note.Verifier{}, log: logger,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "witness_add_checkpoint_requests_total",
			Help: "add-checkpoint requests this witness answered, by result (ok, conflict (also another root at the known size), unknown_origin, bad_signature, bad_proof, malformed, error).",
		}, []string{"result"})}
	for _, l := range logs {
		if l.Origin == "" || strings.Contains(l.Origin, "\n") || l.Verifier == nil {
			return nil, fmt.Errorf("witness: log %q: origin and verifier key are required", l.Origin)
		}
		if _, dup := s.logs[l.Origin]; dup {
			return nil, fmt.Errorf("witness: log %q listed twice", l.Origin)
		}
		s.logs[l.Origin] = l.Verifier
	}
	return s, nil
}

// Collectors returns the witness's Prometheus collectors.
func (s *Server) Collectors() []prometheus.Collector { return []prometheus.Collector{s.results} }

// State returns the size and root the witness last cosigned for origin
// (size 0 if none).
func (s *Server) State(origin string) (uint64, merkle.Hash, error) {
	v, err := s.store.Get([]byte(origin))
	if errors.Is(err, ledger.ErrNotFound) {
		return 0, merkle.Hash{}, nil
	}
	if err != nil {
		return 0, merkle.Hash{}, fmt.Errorf("witness: state of %s: %w", origin, err)
	}
	if len(v) != 8+merkle.HashSize {
		return 0, merkle.Hash{}, fmt.Errorf("witness: state of %s: %d bytes, want %d", origin, len(v), 8+merkle.HashSize)
	}
	var root merkle.Hash
	copy(root[:], v[8:])
	return binary.BigEndian.Uint64(v), root, nil
}

func (s *Server) setState(origin string, size uint64, root merkle.Hash) error {
	v := append(binary.BigEndian.AppendUint64(nil, size), root[:]...)
	if err := s.store.Set([]byte(origin), v); err != nil {
		return fmt.Errorf("witness: store state of %s: %w", origin, err)
	}
	return nil
}

// AddCheckpoint verifies an add-checkpoint request body and returns the
// witness's cosignature lines. Every error leaves the state unchanged.
func (s *Server) AddCheckpoint(body []byte) ([]byte, error) {
	req, err := witness.ParseRequest(body)
	if err != nil {
		return nil, err
	}
	origin, _, _ := strings.Cut(string(req.Checkpoint), "\n")
	v, ok := s.logs[origin]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownOrigin, origin)
	}
	// merkle.OpenNote, not note.Open: a bad signature line of the log's
	// key is refused even next to a good one (c2sp.org/signed-note).
	n, err := merkle.OpenNote(req.Checkpoint, note.VerifierList(v))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	c, err := merkle.ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", witness.ErrMalformed, err)
	}
	if c.Size == 0 && c.Root != merkle.EmptyRoot() {
		// The tree of size 0 has one root, SHA-256 of the empty string
		// (RFC 6962, 2.1): this checkpoint contradicts itself, whatever
		// the witness knows, so it is a bad request (400). Not 403: its
		// signature verifies. Not 409: no old size the client could
		// resend makes it right. Not 422: there is no proof to blame.
		return nil, fmt.Errorf("%w: a checkpoint of size 0 with root %s, not the empty tree's %s", witness.ErrMalformed, c.Root, merkle.EmptyRoot())
	}
	if req.OldSize > c.Size {
		return nil, fmt.Errorf("%w: old %d, checkpoint %d", ErrOldSize, req.OldSize, c.Size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	known, root, err := s.State(origin)
	if err != nil {
		return nil, err
	}
	if req.OldSize != known {
		return nil, &ConflictError{Known: known}
	}
	if known == 0 {
		root = merkle.EmptyRoot() // State's zero hash when it holds nothing
	}
	if c.Size == known && c.Root != root {
		// c2sp.org/tlog-witness: "If the old size matches the checkpoint
		// size, the witness MUST check that the root hashes are also
		// identical. If they don't match, the witness MUST respond with a
		// 409 Conflict". Two roots signed for one size are a fork; the
		// spec lets the witness log the evidence.
		s.log.Warn("witness: the log signed another root for the size it cosigned",
			"origin", origin, "size", known, "cosigned_root", root, "root", c.Root, "checkpoint", string(req.Checkpoint))
		return nil, &ConflictError{Known: known, OtherRoot: true}
	}
	if known == 0 && len(req.Proof) > 0 {
		return nil, fmt.Errorf("%w: a proof from size 0 is empty, got %d hashes", ErrBadProof, len(req.Proof))
	}
	if known > 0 {
		if err := merkle.VerifyConsistency(known, c.Size, req.Proof, root, c.Root); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadProof, err)
		}
	}
	if known == 0 || c.Size > known {
		if err := s.setState(origin, c.Size, c.Root); err != nil {
			return nil, err
		}
	}
	signed, err := note.Sign(&note.Note{Text: n.Text}, s.signer)
	if err != nil {
		return nil, fmt.Errorf("witness: cosign %s@%d: %w", origin, c.Size, err)
	}
	i := bytes.LastIndex(signed, []byte("\n\n"))
	return signed[i+2:], nil
}

// ServeHTTP answers POST /add-checkpoint with the status the spec gives
// each outcome.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "add-checkpoint takes POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		s.results.WithLabelValues("malformed").Inc()
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	cosig, err := s.AddCheckpoint(body)
	var conflict *ConflictError
	switch {
	case err == nil:
		s.results.WithLabelValues("ok").Inc()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(cosig)
		return
	case errors.As(err, &conflict):
		s.results.WithLabelValues("conflict").Inc()
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "%d\n", conflict.Known)
		return
	}
	status, result := statusOf(err)
	s.results.WithLabelValues(result).Inc()
	if status == http.StatusInternalServerError {
		s.log.Error("witness: add-checkpoint failed", "err", err)
	}
	http.Error(w, err.Error(), status)
}

func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, witness.ErrMalformed), errors.Is(err, ErrOldSize):
		return http.StatusBadRequest, "malformed"
	case errors.Is(err, ErrUnknownOrigin):
		return http.StatusNotFound, "unknown_origin"
	case errors.Is(err, ErrBadSignature):
		return http.StatusForbidden, "bad_signature"
	case errors.Is(err, ErrBadProof):
		return http.StatusUnprocessableEntity, "bad_proof"
	}
	return http.StatusInternalServerError, "error"
}

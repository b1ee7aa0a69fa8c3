package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ledger"
)

// Witnessing is the witness side of the API (docs/witness.md). Each part
// may be nil.
type Witnessing struct {
	// AddCheckpoint serves POST /add-checkpoint (c2sp.org/tlog-witness):
	// this auditd as a witness of other logs. It is not behind the read
	// or write token: a log authenticates with its checkpoint signature.
	AddCheckpoint http.Handler
	// Cosigned returns the note GET /v1/logs/{log}/checkpoint serves for
	// cp: its note with the witnesses' cosignature lines appended.
	Cosigned func(log string, cp *ledger.SignedCheckpoint) []byte
	// Status is the witnesses' state for a log whose latest checkpoint
	// has size, shown as "witnesses" by GET /v1/logs/{log}.
	Status func(log string, size uint64) any
}

func (s *Server) witnessRoutes(r chi.Router) {
	if h := s.parts.Witnessing.AddCheckpoint; h != nil {
		r.Method(http.MethodPost, "/add-checkpoint", h)
	}
}

func (s *Server) cosigned(l *ledger.Log, cp *ledger.SignedCheckpoint) []byte {
	if f := s.parts.Witnessing.Cosigned; f != nil {
		return f(l.Name(), cp)
	}
	return cp.Note
}

func (s *Server) witnessStatus(l *ledger.Log) any {
	f := s.parts.Witnessing.Status
	if f == nil {
		return nil
	}
	var size uint64
	if cp := l.Checkpoint(); cp != nil {
		size = cp.Size
	}
	return f(l.Name(), size)
}

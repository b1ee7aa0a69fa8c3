package api

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/auditd/auditd/ledger"
)

// History keeps the daemon's own recent history for the status page's
// charts (GET /v1/history): every interval, each log's size and checkpoint
// and each derivation's confirmed drifted keys. It holds a bounded number
// of samples and of logs, so its memory does not grow with time or with
// the number of logs.
type History struct {
	store  *ledger.Store
	derivs Derivations
	every  time.Duration
	keep   int
	// maxLogs bounds the logs sampled (the first by name); the page
	// draws charts for that many at most.
	maxLogs int

	mu      sync.Mutex
	samples []Sample // oldest first, at most keep
	cpSince map[string]cpSeen
}

type cpSeen struct {
	size  uint64
	since time.Time
}

// Sample is one point of History.
type Sample struct {
	At    time.Time            `json:"at"`
	Logs  map[string]LogSample `json:"logs"`
	Drift map[string]int       `json:"drift_keys,omitempty"` // confirmed drifted keys by derivation
}

// LogSample is a log's state at a Sample.
type LogSample struct {
	Size       uint64 `json:"size"`
	Checkpoint uint64 `json:"checkpoint"`
	// CheckpointAge is the time since the log's checkpoint last grew, as
	// this daemon saw it (from its start for a checkpoint that has not
	// grown since).
	CheckpointAge float64 `json:"checkpoint_age_seconds"`
}

// NewHistory returns a History of store (and derivs, if not nil) sampled
// every interval, keeping keep samples of up to maxLogs logs.
func NewHistory(store *ledger.Store, derivs Derivations, every time.Duration, keep, maxLogs int) *History {
	return &History{store: store, derivs: derivs, every: every, keep: keep, maxLogs: maxLogs, cpSince: map[string]cpSeen{}}
}

// Run samples until ctx ends.
func (h *History) Run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		h.Sample(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample records one sample taken at now.
func (h *History) Sample(now time.Time) {
	infos := h.store.Logs()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	if len(infos) > h.maxLogs {
		infos = infos[:h.maxLogs]
	}
	s := Sample{At: now.UTC(), Logs: make(map[string]LogSample, len(infos))}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, li := range infos {
		l, err := h.store.Log(li.Name)
		if err != nil {
			continue
		}
		ls := LogSample{Size: l.Size()}
		if cp := l.Checkpoint(); cp != nil {
			ls.Checkpoint = cp.Size
		}
		seen, ok := h.cpSince[li.Name]
		if !ok || seen.size != ls.Checkpoint {
			seen = cpSeen{size: ls.Checkpoint, since: now}
			h.cpSince[li.Name] = seen
		}
		ls.CheckpointAge = now.Sub(seen.since).Seconds()
		s.Logs[li.Name] = ls
	}
	if h.derivs != nil {
		s.Drift = map[string]int{}
		for _, j := range h.derivs.Jobs() {
			s.Drift[j.Name] = j.Confirmed
		}
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > h.keep {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-h.keep:]...)
	}
}

// Samples returns a copy of the samples, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...)
}

// SetHistory sets the history GET /v1/history serves (until it is set the
// route answers 404).
func (s *Server) SetHistory(h *History) { s.history.Store(h) }

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	h := s.history.Load()
	if h == nil {
		writeError(w, http.StatusNotFound, "no_history", "this server keeps no history", nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"interval_seconds": h.every.Seconds(), "samples": h.Samples()})
}

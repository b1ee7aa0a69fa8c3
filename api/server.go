// Package api is auditd's HTTP interface: ingestion, entries, checkpoints,
// inclusion and consistency proofs, tiles, health and metrics wiring.
package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// Server serves the API for one store.
type Server struct {
	store    *ledger.Store
	verifier string
	limits   Limits
	parts    Components
	authz    atomic.Pointer[authHolder] // SetAuth
	log      *slog.Logger
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// postOK and postDuration are the series of POST entries answered 200
	// (see instrument).
	postOK       prometheus.Counter
	postDuration prometheus.Observer
	handler      http.Handler            // the chain (chain.go)
	router       *chi.Mux                // every route but the POSTs dispatch takes
	postHandler  http.Handler            // POST entries behind the write check
	writes       chan struct{}           // a slot per POST being decoded and appended
	budget       *byteBudget             // bytes of the bodies being decoded and appended
	streams      chan struct{}           // a place per open event stream
	info         atomic.Pointer[Info]    // GET /v1/info (info.go)
	history      atomic.Pointer[History] // GET /v1/history (history.go)
}

// New returns a server for store. verifierKey is the signed-note verifier
// key of the store's checkpoint signer, served at /v1/verifier.
func New(store *ledger.Store, verifierKey string, opts Options) *Server {
	lim := opts.Limits.withDefaults()
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		store: store, verifier: verifierKey, limits: lim, parts: opts.Components, log: logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"route"}),
	}
	s.postOK = s.requests.WithLabelValues(entriesRoute, http.MethodPost, "200")
	s.postDuration = s.duration.WithLabelValues(entriesRoute)
	s.writes = make(chan struct{}, lim.MaxConcurrentWrites)
	s.budget = newByteBudget(lim.MaxInflightBytes)
	s.streams = make(chan struct{}, lim.MaxStreams)
	s.SetAuth(opts.Auth)
	s.handler = s.chain()
	return s
}

// Collectors returns the server's Prometheus collectors: the request
// counts and latencies, and how much of the write limits POSTs hold.
func (s *Server) Collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	return []prometheus.Collector{s.requests, s.duration,
		gauge("http_write_slots_in_use", "POSTs of entries holding a write slot: their bodies are being read and decoded.",
			func() float64 { return float64(len(s.writes)) }),
		gauge("http_write_slots", "Write slots (max_concurrent_writes): POSTs of entries beyond them wait.",
			func() float64 { return float64(cap(s.writes)) }),
		gauge("http_body_budget_in_use_bytes", "Bytes of the in-flight body budget POSTs of entries hold (their bodies' bytes and a cost per event), from their admission until their entries are in the ledger.",
			func() float64 { return float64(s.budget.inUse()) }),
		gauge("http_body_budget_bytes", "The in-flight body budget (max_inflight_bytes): a POST waits while its share does not fit.",
			func() float64 { return float64(s.budget.total) }),
		gauge("http_streams_open", "Event streams (GET /v1/alerts/stream) open.",
			func() float64 { return float64(len(s.streams)) }),
		gauge("http_streams_max", "Event streams that may be open at once (max_streams): one beyond gets 503 too_many_streams.",
			func() float64 { return float64(cap(s.streams)) }),
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every body on every route is bounded, before anything else runs:
	// an answer of 401, 404 or 405 waits for the body it did not read.
	boundBody(w, r, s.limits.BodyTimeout)
	s.handler.ServeHTTP(w, r)
}

// routes returns the router; chain puts the middleware every request runs
// through around it.
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(routeNamer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path, nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path, nil)
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	s.witnessRoutes(r)
	if s.parts.Metrics != nil {
		// Metrics name every log: behind the read token when there is one.
		r.With(s.auth(false)).Method(http.MethodGet, "/metrics", s.parts.Metrics)
	}
	r.Route("/v1", func(r chi.Router) {
		r.With(s.auth(false)).Get("/verifier", s.getVerifier)
		r.With(s.auth(false)).Get("/logs", s.listLogs)
		r.With(s.auth(false)).Get("/info", s.getInfo)       // info.go
		r.With(s.auth(false)).Get("/history", s.getHistory) // history.go
		r.With(s.auth(false)).Route("/alerts", s.alertRoutes)
		r.Route("/derivations", s.derivationRoutes)
		r.Route("/checks", s.checkRoutes)
		r.Route("/logs/{log}", func(r chi.Router) {
			r.With(s.auth(true)).Post("/entries", s.postEntries)
			r.Group(func(r chi.Router) {
				r.Use(s.auth(false))
				r.Get("/", s.getLog)
				r.Get("/entries", s.getEntryByID)
				r.Get("/entries/{index}", s.getEntry)
				r.Get("/checkpoint", s.getCheckpoint)
				r.Head("/checkpoint", s.getCheckpoint)
				r.Get("/checkpoints", s.listCheckpoints)
				r.Get("/proof/inclusion", s.getInclusion)
				r.Get("/proof/consistency", s.getConsistency)
				r.Get("/tile/*", s.getTile)
				r.Head("/tile/*", s.getTile)
				r.Get("/payloads/*", s.getPayloadBundle) // payloads.go
				r.Head("/payloads/*", s.getPayloadBundle)
				r.Get("/bundles/*", s.getBundle) // bundles.go
				r.Head("/bundles/*", s.getBundle)
			})
		})
	})
	return r
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports not ready while any log's writer has stopped on an error,
// while the ledger refuses appends for lack of disk space ("reason":
// "disk_full"), and while the Ready component says so.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var failed []string
	for _, li := range s.store.Logs() {
		if l, err := s.store.Log(li.Name); err == nil && l.Err() != nil {
			failed = append(failed, li.Name+": "+l.Err().Error())
		}
	}
	// With reads protected, the unauthenticated probe learns only ready or
	// not, and why in one word: no log names, no error text (the log has
	// them).
	private := !s.currentAuth().PublicReads()
	notReady := func(reason string, detail map[string]any) {
		out := map[string]any{"status": "not ready", "reason": reason}
		if private {
			s.log.Debug("not ready", "reason", reason, "detail", detail)
		} else {
			maps.Copy(out, detail)
		}
		writeJSON(w, http.StatusServiceUnavailable, out)
	}
	if len(failed) > 0 {
		notReady("log_failed", map[string]any{"failed_logs": failed})
		return
	}
	if err := s.store.NoSpace(); err != nil {
		notReady("disk_full", map[string]any{"error": err.Error()})
		return
	}
	if s.parts.Ready != nil {
		if err := s.parts.Ready.Ready(); err != nil {
			notReady("not_ready", map[string]any{"error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) getVerifier(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(s.verifier + "\n"))
}

func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"error": capMessage(msg), "code": code}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Payloads are served byte for byte so their SHA-256 can be checked;
	// HTML escaping would rewrite <, > and &.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeErr maps an error to its status and JSON body.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var conflict *ledger.ConflictError
	var decode *ingest.DecodeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &conflict):
		extra := map[string]any{"id": conflict.ID, "item": conflict.Item}
		if conflict.EarlierItem >= 0 {
			extra["earlier_item"] = conflict.EarlierItem
		} else {
			extra["index"] = conflict.Index
		}
		writeError(w, http.StatusConflict, "id_conflict", conflict.Error(), extra)
		s.raiseConflict(conflict)
	case isBodyTimeout(err):
		writeError(w, http.StatusRequestTimeout, "body_timeout",
			"the request body did not arrive within "+s.limits.BodyTimeout.String(), map[string]any{"timeout_seconds": s.limits.BodyTimeout.Seconds()})
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large",
			"request body exceeds "+itoa(uint64(tooBig.Limit))+" bytes", map[string]any{"limit": tooBig.Limit})
	case errors.As(err, &decode):
		extra := map[string]any{"line": decode.Line}
		if decode.Item >= 0 {
			extra["item"] = decode.Item
		}
		switch decode.Exceeds {
		case "payload", "events":
			extra["limit"] = decode.Limit
			code := map[string]string{"payload": "payload_too_large", "events": "too_many_events"}[decode.Exceeds]
			writeError(w, http.StatusRequestEntityTooLarge, code, decode.Error(), extra)
		default:
			writeError(w, http.StatusBadRequest, "malformed_body", decode.Error(), extra)
		}
	case errors.Is(err, ingest.ErrEmpty):
		writeError(w, http.StatusBadRequest, "empty_batch", "the request holds no events", nil)
	case errors.Is(err, ledger.ErrLogNotFound):
		writeError(w, http.StatusNotFound, "log_not_found", err.Error(), nil)
	case errors.Is(err, ledger.ErrNotFound):
		writeError(w, http.StatusNotFound, "entry_not_found", err.Error(), nil)
	case errors.Is(err, ledger.ErrRange):
		writeError(w, http.StatusBadRequest, "out_of_range", err.Error(), nil)
	case errors.Is(err, ledger.ErrInvalid), errors.Is(err, ledger.ErrLogName):
		writeError(w, http.StatusBadRequest, "invalid", err.Error(), nil)
	case errors.Is(err, ledger.ErrIntegrity):
		// Stored data contradicts the tree: never the caller's fault, and
		// a retry does not help. The store has logged, counted and raised it.
		extra := map[string]any{}
		var ie *ledger.IntegrityError
		if errors.As(err, &ie) {
			extra["kind"] = ie.Kind
			if ie.Index >= 0 {
				extra["index"] = ie.Index
			}
		}
		writeError(w, http.StatusInternalServerError, "integrity", err.Error(), extra)
	case errors.Is(err, ledger.ErrReadOnly):
		writeError(w, http.StatusServiceUnavailable, "read_only", err.Error(), nil)
	case errors.Is(err, ledger.ErrNoSpace):
		// Nothing of the request was written; it may be retried once
		// space is freed (the ledger resumes by itself).
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, "disk_full", err.Error(), nil)
	case errors.Is(err, ledger.ErrClosed), errors.Is(err, ledger.ErrFailed):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
	default:
		if r.Context().Err() != nil {
			writeError(w, http.StatusServiceUnavailable, "timeout", "request ended before completion: "+err.Error(), nil)
			return
		}
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
	}
}

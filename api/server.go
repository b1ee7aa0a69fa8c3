// Package api is auditd's HTTP interface: ingestion, entries, checkpoints,
// inclusion and consistency proofs, tiles, health and metrics wiring.
package api

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// Options configure a Server.
type Options struct {
	// MaxBodyBytes bounds a request body (default 32 MiB); larger bodies
	// get 413.
	MaxBodyBytes int64
	// MaxEvents bounds the events of one POST (default 100,000).
	MaxEvents int
	// MaxPayloadBytes bounds one event's payload (default 1 MiB).
	MaxPayloadBytes int
	// WriteToken, if set, is the bearer token POST requests must carry.
	// With only ReadToken set, POSTs must carry the read token: writes are
	// never open when any token is set.
	WriteToken string
	// ReadToken, if set, is the bearer token read requests must carry
	// (the write token is accepted too). Reads are public by default.
	ReadToken string
	// CreateLogs lets a POST to an unknown log create it.
	CreateLogs bool
	// MaxLogs, if positive, bounds the logs a POST may create: past it a
	// POST to a new name gets 403 too_many_logs.
	MaxLogs int
	// MaxConcurrentWrites bounds the POSTs read and decoded at once
	// (default 16); others wait their turn. A POST gives its slot back
	// once its body is decoded: while its entries wait for their group
	// commit it holds only its share of MaxInflightBytes.
	MaxConcurrentWrites int
	// WaitTimeout bounds ?wait=checkpoint (default 30s).
	WaitTimeout time.Duration
	// BodyTimeout bounds the time a request body takes to arrive (default
	// 30s), on every route (see BodyDeadline). A POST of entries counts it
	// from when its write slot is granted, not while it waits for one; a
	// slower body gets 408 and its slot back.
	BodyTimeout time.Duration
	// MaxInflightBytes bounds the bytes of the POST bodies being decoded
	// and appended at once, across requests (default 4 x MaxBodyBytes). A
	// POST takes its Content-Length (MaxBodyBytes without one) from it
	// before reading its body, and waits while it is spent.
	MaxInflightBytes int64
	// Metrics serves /metrics, if set.
	Metrics http.Handler
	Logger  *slog.Logger
	// Alerts serves /v1/alerts, if set (see alertRoutes); without it
	// those routes answer 404.
	Alerts *alert.Manager
	// MaxStreams bounds the event streams (GET /v1/alerts/stream) open at
	// once (default 100); beyond it a stream gets 503 too_many_streams
	// with a Retry-After.
	MaxStreams int
	// StreamKeepalive is the interval of the comment lines that keep an
	// idle alert event stream (and the proxies on its way) open (default
	// 15s).
	StreamKeepalive time.Duration
	// SourceStatus, if set, reports how a log is fed (a Kafka partition's
	// position, gaps, conflicts and lag), shown by GET /v1/logs/{log}.
	SourceStatus func(log string) (any, bool)
	// Derivations serves /v1/derivations, if set.
	Derivations Derivations
	// Checks serves /v1/checks, if set (see checkRoutes).
	Checks Checks
	// Ready, if set, is asked by /readyz: an error means not ready (for
	// example a Kafka source that cannot reach its brokers).
	Ready func() error
	// Witnessing, if set, adds the witness parts: POST /add-checkpoint,
	// cosignatures on checkpoints, witness status (see api/witness.go).
	Witnessing Witnessing
}

// Server serves the API for one store.
type Server struct {
	store    *ledger.Store
	verifier string
	opts     Options
	log      *slog.Logger
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// postOK and postDuration are the series of POST entries answered 200
	// (see servePostEntries).
	postOK       prometheus.Counter
	postDuration prometheus.Observer
	handler      http.Handler
	writes       chan struct{}             // a slot per POST being decoded and appended
	budget       *byteBudget               // bytes of the bodies being decoded and appended
	streams      chan struct{}             // a place per open event stream
	tokens       atomic.Pointer[tokenPair] // the write and read tokens; SetTokens replaces them (admin.go)
	info         atomic.Pointer[Info]      // GET /v1/info (info.go)
	history      atomic.Pointer[History]   // GET /v1/history (history.go)
}

// New returns a server for store. verifierKey is the signed-note verifier
// key of the store's checkpoint signer, served at /v1/verifier.
func New(store *ledger.Store, verifierKey string, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 100_000
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = 1 << 20
	}
	if opts.MaxConcurrentWrites <= 0 {
		opts.MaxConcurrentWrites = 16
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = 30 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = defaultBodyTimeout
	}
	if opts.MaxInflightBytes <= 0 {
		opts.MaxInflightBytes = 4 * opts.MaxBodyBytes
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 100
	}
	if opts.StreamKeepalive <= 0 {
		opts.StreamKeepalive = 15 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		store: store, verifier: verifierKey, opts: opts, log: opts.Logger,
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
	s.writes = make(chan struct{}, opts.MaxConcurrentWrites)
	s.budget = newByteBudget(opts.MaxInflightBytes)
	s.streams = make(chan struct{}, opts.MaxStreams)
	s.tokens.Store(&tokenPair{write: opts.WriteToken, read: opts.ReadToken})
	s.handler = s.routes()
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
	boundBody(w, r, s.opts.BodyTimeout)
	if name, ok := entriesPath(r); ok {
		s.servePostEntries(w, r, name)
		return
	}
	s.handler.ServeHTTP(w, r)
}

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer, s.instrument)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path, nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path, nil)
	})
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	s.witnessRoutes(r)
	if s.opts.Metrics != nil {
		// Metrics name every log: behind the read token when there is one.
		r.With(s.auth(false)).Method(http.MethodGet, "/metrics", s.opts.Metrics)
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
			})
		})
	})
	return r
}

func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		code := ww.Status()
		if code == 0 {
			code = http.StatusOK
		}
		s.requests.WithLabelValues(route, r.Method, statusText(code)).Inc()
		s.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func statusText(code int) string {
	const digits = "0123456789"
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}

// auth checks the bearer token for writes (write true) or reads.
func (s *Server) auth(write bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r, write) {
				s.unauthorized(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// authorized reports whether r carries the token a write (write true) or a
// read needs.
func (s *Server) authorized(r *http.Request, write bool) bool {
	tok := s.tokens.Load()
	switch {
	case write && tok.write == "" && tok.read == "":
		return true
	case write && tok.write == "":
		// A read token alone protects writes too: a deployment that
		// guards reads never leaves writes open.
		return tokenIs(r, tok.read)
	case write:
		return tokenIs(r, tok.write)
	case tok.read == "":
		return true
	default:
		return tokenIs(r, tok.read) || (tok.write != "" && tokenIs(r, tok.write))
	}
}

func (s *Server) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="auditd"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token", nil)
}

func tokenIs(r *http.Request, want string) bool {
	scheme, got, found := strings.Cut(r.Header.Get("Authorization"), " ")
	// The scheme name is case-insensitive (RFC 9110, section 11.1).
	return found && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports not ready while any log's writer has stopped on an error,
// while the ledger refuses appends for lack of disk space ("reason":
// "disk_full"), and while s.opts.Ready says so.
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
	private := s.tokens.Load().read != ""
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
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
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
			"the request body did not arrive within "+s.opts.BodyTimeout.String(), map[string]any{"timeout_seconds": s.opts.BodyTimeout.Seconds()})
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

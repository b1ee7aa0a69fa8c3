package api

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/auditd/auditd/alert"
)

// Options configure a Server: what a request may do and how much
// (Limits), who may read and write (Auth), and the parts of auditd the API
// serves beside the ledger (Components).
type Options struct {
	Limits Limits
	// Auth decides who may read and who may write. Nil is Tokens{}: reads
	// and writes open. The server swaps it while serving with
	// (*Server).SetAuth.
	Auth       Auth
	Components Components
	Logger     *slog.Logger
}

// Limits bound what requests may do and how much. A zero field takes its
// default.
type Limits struct {
	// MaxBodyBytes bounds a request body (default 32 MiB); larger bodies
	// get 413.
	MaxBodyBytes int64
	// MaxEvents bounds the events of one POST (default 100,000).
	MaxEvents int
	// MaxPayloadBytes bounds one event's payload (default 1 MiB).
	MaxPayloadBytes int
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
	// MaxStreams bounds the event streams (GET /v1/alerts/stream) open at
	// once (default 100); beyond it a stream gets 503 too_many_streams
	// with a Retry-After.
	MaxStreams int
	// StreamKeepalive is the interval of the comment lines that keep an
	// idle alert event stream (and the proxies on its way) open (default
	// 15s).
	StreamKeepalive time.Duration
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 32 << 20
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = 100_000
	}
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = 1 << 20
	}
	if l.MaxConcurrentWrites <= 0 {
		l.MaxConcurrentWrites = 16
	}
	if l.WaitTimeout <= 0 {
		l.WaitTimeout = 30 * time.Second
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = defaultBodyTimeout
	}
	if l.MaxInflightBytes <= 0 {
		l.MaxInflightBytes = 4 * l.MaxBodyBytes
	}
	if l.MaxStreams <= 0 {
		l.MaxStreams = 100
	}
	if l.StreamKeepalive <= 0 {
		l.StreamKeepalive = 15 * time.Second
	}
	return l
}

// Components are the parts of auditd the API serves beside the ledger.
// Each may be nil (or zero): its routes then answer 404, or the part it
// adds to an answer is left out.
type Components struct {
	// Metrics serves /metrics.
	Metrics http.Handler
	// Alerts serves /v1/alerts (see alertRoutes) and is told of id
	// conflicts in POSTs.
	Alerts Alerts
	// Sources reports how a log is fed, shown by GET /v1/logs/{log}.
	Sources Sources
	// Ready is asked by /readyz.
	Ready Readiness
	// Derivations serves /v1/derivations.
	Derivations Derivations
	// Checks serves /v1/checks (see checkRoutes).
	Checks Checks
	// Witnessing adds the witness parts: POST /add-checkpoint,
	// cosignatures on checkpoints, witness status (see witness.go).
	Witnessing Witnessing
}

// Alerts is what the API needs of the alert manager. Its methods are
// called concurrently.
type Alerts interface {
	// List returns the alerts f selects.
	List(f alert.Filter) []alert.Alert
	// Get returns the alert with the id, and whether there is one.
	Get(id string) (alert.Alert, bool)
	// Subscribe returns every firing alert, then every change, until ctx
	// ends or cancel is called; the channel closes when the stream ends.
	Subscribe(ctx context.Context) (events <-chan alert.Alert, cancel func())
	// Fire raises a or updates the alert with its id.
	Fire(a alert.Alert) (alert.Alert, error)
}

var _ Alerts = (*alert.Manager)(nil)

// Sources reports how a log is fed (a Kafka partition's position, gaps,
// conflicts and lag): ok false for a log no source feeds.
type Sources interface {
	Status(log string) (status any, ok bool)
}

// SourcesFunc adapts a function to Sources.
type SourcesFunc func(log string) (any, bool)

// Status calls f.
func (f SourcesFunc) Status(log string) (any, bool) { return f(log) }

// Readiness is asked by /readyz: an error means not ready (for example a
// Kafka source that cannot reach its brokers).
type Readiness interface {
	Ready() error
}

// ReadyFunc adapts a function to Readiness.
type ReadyFunc func() error

// Ready calls f.
func (f ReadyFunc) Ready() error { return f() }

// Auth decides which requests may read and which may write.
//
// A server asks its Auth once per request, before the handler runs, and
// once per /readyz answer; (*Server).SetAuth replaces it while the server
// runs (a configuration reload of the tokens), and each request is judged
// wholly by the old or wholly by the new one. Implementations must be safe
// for concurrent use and must not block.
type Auth interface {
	// Allow reports whether r may write (write true: POSTs of entries,
	// on-demand runs) or read.
	Allow(r *http.Request, write bool) bool
	// PublicReads reports whether reads need no credentials. Otherwise
	// the unauthenticated /readyz says only ready or not and why in one
	// word, without log names or error text.
	PublicReads() bool
}

// Tokens is the bearer-token Auth: requests carry "Authorization: Bearer
// <token>".
type Tokens struct {
	// Write, if set, is the token writes must carry. With only Read set,
	// writes must carry the read token: writes are never open when any
	// token is set.
	Write string
	// Read, if set, is the token reads must carry (the write token is
	// accepted too). Reads are public by default.
	Read string
}

var _ Auth = Tokens{}

// Allow implements Auth.
func (t Tokens) Allow(r *http.Request, write bool) bool {
	switch {
	case write && t.Write == "" && t.Read == "":
		return true
	case write && t.Write == "":
		// A read token alone protects writes too: a deployment that
		// guards reads never leaves writes open.
		return tokenIs(r, t.Read)
	case write:
		return tokenIs(r, t.Write)
	case t.Read == "":
		return true
	default:
		return tokenIs(r, t.Read) || (t.Write != "" && tokenIs(r, t.Write))
	}
}

// PublicReads implements Auth.
func (t Tokens) PublicReads() bool { return t.Read == "" }

func tokenIs(r *http.Request, want string) bool {
	scheme, got, found := strings.Cut(r.Header.Get("Authorization"), " ")
	// The scheme name is case-insensitive (RFC 9110, section 11.1).
	return found && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

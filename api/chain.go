package api

import (
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
)

// Every request runs through one chain of middleware, whether chi routes
// it or it is a POST of entries served without the router:
//
//	ServeHTTP    bounds the body's arrival (boundBody)
//	instrument   counts and times the request by route
//	recoverPanic answers 500 to a panic and logs it
//	dispatch     POST /v1/logs/{log}/entries: auth(write), then postEntries
//	             anything else: chi, whose routes add auth where they need it
//
// POST entries is the one route hit once per event by producers that send
// events one at a time, so dispatch takes it before the router: exactly
// the requests chi would route there (POST, an unescaped path of that
// shape; TestEntriesPathMatchesRouter), with the same middleware around
// the same handler. Every other request, including a POST to an escaped
// path, goes through chi, which routes the same POST there too.

// chain builds the handler ServeHTTP runs: the middleware above around
// dispatch.
func (s *Server) chain() http.Handler {
	s.router = s.routes()
	s.postHandler = s.auth(true)(http.HandlerFunc(s.postEntries))
	return s.instrument(s.recoverPanic(http.HandlerFunc(s.dispatch)))
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if _, ok := entriesPath(r); ok {
		nameRoute(w, entriesRoute)
		s.postHandler.ServeHTTP(w, r)
		return
	}
	s.router.ServeHTTP(w, r)
}

// recorder is the ResponseWriter instrument hands down the chain: it
// records the answer's status code and, once the request is routed, its
// route (nameRoute).
type recorder struct {
	http.ResponseWriter
	code  int
	route string
}

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// nameRoute names the route of the request w answers, for instrument.
func nameRoute(w http.ResponseWriter, route string) {
	if rec, ok := w.(*recorder); ok {
		rec.route = route
	}
}

// routeNamer is the router's first middleware: once chi has routed and
// served the request, even by a panic, it hands the route's pattern to
// instrument ("" when none matched).
func routeNamer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if rc := chi.RouteContext(r.Context()); rc != nil {
				nameRoute(w, rc.RoutePattern())
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// instrument counts each request in http_requests_total by route, method
// and status code, and times it in http_request_duration_seconds by route.
// A request no route matched is counted under "unmatched". A panic is
// counted as the 500 recoverPanic answers.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		route := rec.route
		if route == "" {
			route = "unmatched"
		}
		if route == entriesRoute && code == http.StatusOK && r.Method == http.MethodPost {
			// The hot series, looked up once (New).
			s.postOK.Inc()
			s.postDuration.Observe(time.Since(start).Seconds())
			return
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

// recoverPanic answers 500 to a handler's panic (but for
// http.ErrAbortHandler, which net/http handles) and logs it with its stack.
func (s *Server) recoverPanic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if rvr := recover(); rvr != nil {
				if rvr == http.ErrAbortHandler {
					panic(rvr)
				}
				s.log.Error("panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", rvr, "stack", string(debug.Stack()))
				if r.Header.Get("Connection") != "Upgrade" {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// auth lets a request through if the server's Auth allows it a write
// (write true) or a read, and answers 401 otherwise.
func (s *Server) auth(write bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.currentAuth().Allow(r, write) {
				s.unauthorized(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func (s *Server) unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="auditd"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token", nil)
}

// authHolder holds the server's Auth for atomic replacement.
type authHolder struct{ Auth }

// SetAuth replaces who may read and who may write, while the server runs:
// requests already past their check finish under the old Auth, later ones
// are judged by a (nil: reads and writes open, as Tokens{}). A reload of
// the configuration's tokens calls it with the new Tokens. It is safe to
// call concurrently with requests.
func (s *Server) SetAuth(a Auth) {
	if a == nil {
		a = Tokens{}
	}
	s.authz.Store(&authHolder{a})
}

func (s *Server) currentAuth() Auth { return s.authz.Load().Auth }

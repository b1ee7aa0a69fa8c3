// Package redirect holds the redirect policy of auditd's outgoing HTTP
// clients. They send configured secrets (bearer tokens, headers such as
// X-Api-Key), and net/http copies a request's headers onto the request
// that follows a redirect: it drops only Authorization, Cookie and
// WWW-Authenticate, and only when the host name changes, not when the
// port does. A server that redirects (or is made to redirect) elsewhere
// would then receive them. SameOrigin follows a redirect only within the
// origin the request was sent to.
package redirect

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// MaxRedirects is how many redirects SameOrigin follows, as net/http's
// default policy.
const MaxRedirects = 10

// ErrCrossOrigin is what SameOrigin's refusals of a redirect to another
// origin wrap.
var ErrCrossOrigin = errors.New("redirect to another origin refused")

// SameOrigin is an http.Client CheckRedirect policy: it follows a redirect
// whose target has the origin (scheme, host and port) of the first
// request, up to MaxRedirects, and refuses one to any other origin with
// an error naming both origins (never a path, query or user info, which
// may hold secrets) and wrapping ErrCrossOrigin. The client then returns
// that error; the other origin receives nothing.
func SameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	}
	if len(via) == 0 {
		return nil
	}
	from, to := Origin(via[0].URL), Origin(req.URL)
	if from != to {
		return fmt.Errorf("%w: %s redirected to %s: a redirect is followed only to the same scheme, host and port, "+
			"so that the configured token or headers go nowhere else; configure the final URL instead", ErrCrossOrigin, from, to)
	}
	return nil
}

// Origin is u's scheme, host and port ("https://example.org:443"), the
// port made explicit and scheme and host lowercased, so that equal
// origins compare equal.
func Origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

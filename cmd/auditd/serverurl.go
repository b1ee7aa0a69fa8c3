package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/auditd/auditd/internal/redact"
)

// serverURL is the base URL of a --server value: a URL with an http or
// https scheme, or a bare host:port (as --listen prints it), taken as
// http://host:port, or https://host:port when TLS flags were given. The
// result has no trailing slash.
func serverURL(s string, tlsf clientTLSFlags) (string, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "/")
	if s == "" {
		return "", fmt.Errorf("--server is empty: give a URL such as http://127.0.0.1:8080, or host:port")
	}
	raw := s
	if !strings.Contains(s, "://") {
		scheme := "http://"
		if !tlsf.files.IsZero() {
			scheme = "https://"
		}
		raw = scheme + s
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--server %q: want a URL such as http://127.0.0.1:8080 or https://auditd.example, or host:port", redact.URL(s))
	}
	return raw, nil
}

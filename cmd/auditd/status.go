package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/auditd/auditd/internal/redact"
)

// statusClient reads a running auditd's JSON API with an optional read
// token.
type statusClient struct {
	base  string
	token string
	http  *http.Client
}

// errNotConfigured is a 404 whose code says the feature is off on the
// server (no derivations, checks or alerts), not a missing endpoint.
var errNotConfigured = errors.New("not configured on this server")

// get decodes the JSON answer of path into v and returns the next page's
// URL from a Link rel="next" header ("" when there is none).
func (c *statusClient) get(ctx context.Context, path string, v any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return "", redact.Error(err, c.base) // a parse error quotes the URL
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, redact.Error(err, c.base))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    string `json:"code"`
			Message string `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		switch e.Code {
		case "no_derivations", "checks_disabled", "alerts_disabled":
			return "", errNotConfigured
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return "", fmt.Errorf("GET %s: %s: the server protects reads; pass --token (or AUDITD_READ_TOKEN)", path, resp.Status)
		}
		msg := e.Message
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		return "", fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, msg)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return "", fmt.Errorf("GET %s: %w", path, err)
	}
	return nextLink(resp.Header.Get("Link")), nil
}

// nextLink returns the path of a Link header's rel="next" target.
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		target, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.Contains(params, `rel="next"`) {
			return strings.Trim(strings.TrimSpace(target), "<>")
		}
	}
	return ""
}

// serverStatus is what `auditd status` reads; with --json it is printed
// as it is. A section the server does not have is null.
type serverStatus struct {
	Server      string            `json:"server"`
	Logs        []json.RawMessage `json:"logs"`
	Derivations []json.RawMessage `json:"derivations"`
	Checks      []json.RawMessage `json:"checks"`
	Alerts      []json.RawMessage `json:"alerts"`
}

// fetch reads every log (following the pages of GET /v1/logs, then each
// log's own GET for its checkpoint and source), the derivations, the
// checks and the firing alerts.
func (c *statusClient) fetch(ctx context.Context, progress func(done, total int)) (*serverStatus, error) {
	st := &serverStatus{Server: redact.URL(c.base)}
	var names []string
	for path := "/v1/logs"; path != ""; {
		var page []struct {
			Name string `json:"name"`
		}
		next, err := c.get(ctx, path, &page)
		if err != nil {
			return nil, err
		}
		for _, l := range page {
			names = append(names, l.Name)
		}
		path = next
	}
	st.Logs = []json.RawMessage{}
	for i, n := range names {
		var l json.RawMessage
		if _, err := c.get(ctx, "/v1/logs/"+url.PathEscape(n)+"/", &l); err != nil {
			return nil, err
		}
		st.Logs = append(st.Logs, l)
		progress(i+1, len(names))
	}
	for _, sec := range []struct {
		path, field string
		dst         *[]json.RawMessage
	}{
		{"/v1/derivations", "derivations", &st.Derivations},
		{"/v1/checks", "checks", &st.Checks},
		{"/v1/alerts?state=firing&limit=1000", "alerts", &st.Alerts},
	} {
		var m map[string][]json.RawMessage
		_, err := c.get(ctx, sec.path, &m)
		if errors.Is(err, errNotConfigured) {
			continue
		}
		if err != nil {
			return nil, err
		}
		*sec.dst = m[sec.field]
		if *sec.dst == nil {
			*sec.dst = []json.RawMessage{}
		}
	}
	return st, nil
}

// runStatus is `auditd status`: exit 0 when the server answered, 1 when it
// could not be read, 2 for a bad command line.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "the auditd server: a URL, or host:port for http://host:port")
	token := fs.String("token", os.Getenv("AUDITD_READ_TOKEN"), "bearer token if the server protects reads (also --read-token)")
	fs.StringVar(token, "read-token", *token, "same as --token")
	asJSON := fs.Bool("json", false, "print the server's answers as one JSON object instead of tables")
	timeout := fs.Duration("timeout", time.Minute, "overall time limit")
	var tlsf clientTLSFlags
	bindClientTLSFlags(fs, &tlsf) // tls.go
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: auditd status --server URL [--json] [--token TOKEN]\n\n"+
			"Shows a running server's logs, derivations, self-audit checks and firing alerts.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "auditd status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	base, err := serverURL(*server, tlsf) // serverurl.go
	if err != nil {
		fmt.Fprintf(stderr, "auditd status: %v\n", err)
		return 2
	}
	hc, err := tlsf.httpClient()
	if err != nil {
		fmt.Fprintf(stderr, "auditd status: %v\n", err)
		return 2
	}
	c := &statusClient{base: base, token: *token, http: hc}
	progress := func(int, int) {}
	if isTerminal(stderr) && !*asJSON {
		progress = func(done, total int) {
			fmt.Fprintf(stderr, "\rreading logs %d/%d", done, total)
			if done == total {
				fmt.Fprint(stderr, "\r\033[K")
			}
		}
	}
	st, err := c.fetch(ctx, progress)
	if err != nil {
		fmt.Fprintf(stderr, "auditd status: %v\n", explainTLS(err))
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintf(stderr, "auditd status: %v\n", err)
			return 1
		}
		return 0
	}
	printStatus(stdout, st, time.Now())
	return 0
}

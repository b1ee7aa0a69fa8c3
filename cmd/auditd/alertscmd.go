package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/internal/redact"
)

// runAlerts is `auditd alerts`: the server's alerts as a table (or JSON),
// or with --follow each change as it happens, from GET /v1/alerts/stream,
// until interrupted. Exit 0, 1 when the server cannot be read, 2 for a bad
// command line.
func runAlerts(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("alerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "the auditd server: a URL, or host:port for http://host:port")
	token := fs.String("token", os.Getenv("AUDITD_READ_TOKEN"), "bearer token if the server protects reads (also --read-token)")
	fs.StringVar(token, "read-token", *token, "same as --token")
	state := fs.String("state", "firing", "which alerts to list: firing, resolved or all")
	limit := fs.Int("limit", 100, "at most this many alerts (1..1000), newest first")
	asJSON := fs.Bool("json", false, "print JSON (with --follow: one alert per line)")
	follow := fs.Bool("follow", false, "print the firing alerts, then every change live, until interrupted")
	var tlsf clientTLSFlags
	bindClientTLSFlags(fs, &tlsf) // tls.go
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: auditd alerts --server URL [--state firing|resolved|all] [--json] [--follow]\n\n"+
			"Lists a running server's alerts, or follows them live (server-sent events).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case *state != "firing" && *state != "resolved" && *state != "all":
		fmt.Fprintf(stderr, "auditd alerts: --state %q: want firing, resolved or all\n", *state)
		return 2
	case *limit < 1 || *limit > 1000:
		fmt.Fprintf(stderr, "auditd alerts: --limit %d: want 1 to 1000\n", *limit)
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "auditd alerts: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	base, err := serverURL(*server, tlsf) // serverurl.go
	if err != nil {
		fmt.Fprintf(stderr, "auditd alerts: %v\n", err)
		return 2
	}
	hc, err := tlsf.httpClient()
	if err != nil {
		fmt.Fprintf(stderr, "auditd alerts: %v\n", err)
		return 2
	}
	c := &statusClient{base: base, token: *token, http: hc}
	if *follow {
		if err := followAlerts(ctx, c, stdout, stderr, *asJSON); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "auditd alerts: %v\n", explainTLS(err))
			return 1
		}
		return 0
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *state != "all" {
		q.Set("state", *state)
	}
	var out struct {
		Alerts []json.RawMessage `json:"alerts"`
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.get(tctx, "/v1/alerts?"+q.Encode(), &out); err != nil {
		fmt.Fprintf(stderr, "auditd alerts: %v\n", explainTLS(err))
		return 1
	}
	if *asJSON {
		if out.Alerts == nil {
			out.Alerts = []json.RawMessage{}
		}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ALERT\tSTATE\tKIND\tSEVERITY\tSINCE\tSUMMARY")
	now := time.Now()
	for _, raw := range out.Alerts {
		var a alert.Alert
		_ = json.Unmarshal(raw, &a)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Kind, orDash(a.Labels["severity"]), ago(a.StartsAt, now), oneLine(a.Summary, 100))
	}
	if len(out.Alerts) == 0 {
		fmt.Fprintf(tw, "(no %s alerts)\n", strings.TrimPrefix(*state, "all"))
	}
	tw.Flush()
	return 0
}

// followAlerts prints each alert of the server's event stream as one line
// (or one JSON object) until ctx ends, skipping events that change neither
// the state nor the summary of an alert already printed (the server sends
// one per update, e.g. per derivation run). A stream that ends (the server
// restarted, or this client fell behind) is opened again after a second;
// the firing alerts the server then sends again are printed only if they
// changed meanwhile.
func followAlerts(ctx context.Context, c *statusClient, stdout, stderr io.Writer, asJSON bool) error {
	seen := map[string]string{} // id -> state and summary last printed
	for {
		err := streamOnce(ctx, c, stdout, asJSON, seen)
		if ctx.Err() != nil {
			return nil
		}
		var fatal fatalStreamError
		if errors.As(err, &fatal) {
			return err
		}
		fmt.Fprintf(stderr, "auditd alerts: stream ended (%v); reconnecting\n", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// fatalStreamError is an answer that reconnecting will not change (a
// refused token, alerts disabled).
type fatalStreamError struct{ error }

func streamOnce(ctx context.Context, c *statusClient, stdout io.Writer, asJSON bool, seen map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/alerts/stream", nil)
	if err != nil {
		return fatalStreamError{redact.Error(err, c.base)}
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return redact.Error(err, c.base)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := fmt.Errorf("GET /v1/alerts/stream: %s: %s", resp.Status, strings.TrimSpace(string(b)))
		if resp.StatusCode < 500 {
			return fatalStreamError{err}
		}
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20) // an alert's details are at most 1 MiB
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "" && data.Len() > 0:
			printAlertEvent(stdout, data.String(), asJSON, seen)
			data.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

func printAlertEvent(w io.Writer, data string, asJSON bool, seen map[string]string) {
	var a alert.Alert
	if err := json.Unmarshal([]byte(data), &a); err != nil {
		fmt.Fprintf(w, "(undecodable event: %v)\n", err)
		return
	}
	if k := string(a.State) + "\x00" + a.Summary; seen[a.ID] == k {
		return
	} else {
		seen[a.ID] = k
	}
	if asJSON {
		fmt.Fprintln(w, data)
		return
	}
	fmt.Fprintf(w, "%s  %-8s  %-9s  %-8s  %s  %s\n", a.UpdatedAt.UTC().Format(time.RFC3339), strings.ToUpper(string(a.State)),
		a.Kind, orDash(a.Labels["severity"]), a.ID, oneLine(a.Summary, 120))
}

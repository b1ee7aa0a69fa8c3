package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
)

// newAlertEnv is a testEnv whose server has an alert manager over a bucket
// of its store. Cleanup closes the HTTP server, then the manager, then the
// store.
func newAlertEnv(t testing.TB, opts api.Options) (*testEnv, *alert.Manager) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(testKeyName))
	verifier, vkey := key.Verifier, key.VKey
	b, err := store.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(b, alert.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	opts.Logger, opts.Components.Alerts = quiet, m
	env := &testEnv{t: t, store: store, verifier: verifier, vkey: vkey, server: api.New(store, vkey, opts)}
	env.http = httptest.NewServer(env.server)
	t.Cleanup(env.http.Close)
	return env, m
}

func fire(t testing.TB, m *alert.Manager, a alert.Alert) alert.Alert {
	t.Helper()
	got, err := m.Fire(a)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

type alertsOut struct {
	Alerts []alert.Alert `json:"alerts"`
}

func alertIDs(as []alert.Alert) string {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return strings.Join(ids, ",")
}

func TestAlertsList(t *testing.T) {
	t.Parallel()
	env, m := newAlertEnv(t, api.Options{})
	var out alertsOut
	r := env.getJSON("/v1/alerts", &out)
	wantBody(t, "no alerts", r.body, `{"alerts":[]}`+"\n")

	fire(t, m, alert.Alert{ID: "drift/balances", Kind: alert.KindDrift, Subject: "balances", Summary: "3 keys <differ> & more",
		Details: json.RawMessage(`{"keys":3}`)})
	fire(t, m, alert.Alert{ID: "integrity/payments.0/offset_conflict", Kind: alert.KindIntegrity, Subject: "payments.0", Summary: "x"})
	fire(t, m, alert.Alert{ID: "store/balances", Kind: alert.KindStoreError, Subject: "balances", Summary: "y"})
	if err := m.Resolve("store/balances"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ query, want string }{
		{"", "store/balances,integrity/payments.0/offset_conflict,drift/balances"},
		{"?state=firing", "integrity/payments.0/offset_conflict,drift/balances"},
		{"?state=resolved", "store/balances"},
		{"?kind=drift", "drift/balances"},
		{"?subject=balances", "store/balances,drift/balances"},
		{"?subject=balances&state=firing&kind=drift", "drift/balances"},
		{"?limit=2", "store/balances,integrity/payments.0/offset_conflict"},
		{"?kind=derivation_error", ""},
	} {
		out = alertsOut{}
		env.getJSON("/v1/alerts"+tc.query, &out)
		if got := alertIDs(out.Alerts); got != tc.want {
			t.Errorf("GET /v1/alerts%s = %s, want %s", tc.query, got, tc.want)
		}
	}
	r = env.getJSON("/v1/alerts?kind=drift", nil)
	a, _ := m.Get("drift/balances")
	wantJSON(t, "drift alert", r.body, `{"alerts":[{"id":"drift/balances","kind":"drift","state":"firing","subject":"balances",
		"summary":"3 keys <differ> & more","labels":{"severity":"warning"},"details":{"keys":3},"starts_at":"`+a.StartsAt.Format(time.RFC3339Nano)+`",
		"updated_at":"`+a.UpdatedAt.Format(time.RFC3339Nano)+`","seq":1}]}`)
	if !strings.Contains(string(r.body), "<differ> & more") {
		t.Errorf("body %s is HTML-escaped", r.body)
	}

	for _, q := range []string{"state=open", "kind=weird", "limit=0", "limit=1001", "limit=x"} {
		r := env.get("/v1/alerts?"+q, http.StatusBadRequest)
		var e struct{ Code, Error string }
		if err := json.Unmarshal(r.body, &e); err != nil || e.Code != "invalid_parameter" || e.Error == "" {
			t.Errorf("GET /v1/alerts?%s: %s", q, r.body)
		}
	}
	r = env.do(http.MethodPost, "/v1/alerts", strings.NewReader("{}"))
	if r.status != http.StatusMethodNotAllowed || !strings.Contains(string(r.body), `"method_not_allowed"`) {
		t.Errorf("POST /v1/alerts: %v", r)
	}
}

func TestAlertGet(t *testing.T) {
	t.Parallel()
	env, m := newAlertEnv(t, api.Options{})
	q := fire(t, m, alert.Alert{ID: "integrity/payments.0/why?#", Kind: alert.KindIntegrity, Subject: "payments.0", Summary: "y"})
	var got alert.Alert
	env.getJSON("/v1/alerts/integrity/payments.0/why%3F%23", &got)
	if got.ID != q.ID || got.Summary != "y" {
		t.Errorf("GET an id with ? and #: %+v", got)
	}
	want := fire(t, m, alert.Alert{ID: "integrity/payments.0/offset_conflict", Kind: alert.KindIntegrity, Subject: "payments.0", Summary: "x",
		Labels: map[string]string{"severity": "critical"}})
	for _, path := range []string{
		"/v1/alerts/integrity/payments.0/offset_conflict",
		"/v1/alerts/integrity%2Fpayments.0%2Foffset_conflict",
		"/v1/alerts/integrity/payments.0/offset%5Fconflict",
	} {
		var got alert.Alert
		env.getJSON(path, &got)
		if got.ID != want.ID || got.Seq != want.Seq || got.Labels["severity"] != "critical" {
			t.Errorf("GET %s = %+v, want %+v", path, got, want)
		}
	}
	r := env.get("/v1/alerts/drift/nothing", http.StatusNotFound)
	if !strings.Contains(string(r.body), `"alert_not_found"`) {
		t.Errorf("unknown alert: %s", r.body)
	}
}

func TestAlertsDisabled(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, envConfig{})
	for _, path := range []string{"/v1/alerts", "/v1/alerts/drift/x", "/v1/alerts/stream"} {
		r := env.get(path, http.StatusNotFound)
		var e struct{ Code, Error string }
		if err := json.Unmarshal(r.body, &e); err != nil || e.Code != "alerts_disabled" || !strings.Contains(e.Error, "not enabled") {
			t.Errorf("GET %s without alerts: %s", path, r.body)
		}
	}
}

func TestAlertsAuth(t *testing.T) {
	t.Parallel()
	env, _ := newAlertEnv(t, api.Options{Auth: api.Tokens{Write: "writer", Read: "reader"}})
	for _, path := range []string{"/v1/alerts", "/v1/alerts/drift/x", "/v1/alerts/stream"} {
		if r := env.do(http.MethodGet, path, nil); r.status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %v", path, r)
		}
	}
	env.token = "reader"
	env.getJSON("/v1/alerts", nil)
	env.token = "writer"
	env.getJSON("/v1/alerts", nil)
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event, data string
	comment         bool
}

// sseReader reads events from a text/event-stream body.
type sseReader struct {
	r *bufio.Reader
}

// next reads the next event or comment block.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, ":"):
			ev.comment = true
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if ev.data != "" {
				return ev, errors.New("more than one data line")
			}
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			return ev, errors.New("unexpected line " + strconv.Quote(line))
		}
	}
}

// alert reads the next event and decodes its alert.
func (s *sseReader) alert(t testing.TB) alert.Alert {
	t.Helper()
	ev, err := s.next()
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	if ev.event != "alert" || ev.comment {
		t.Fatalf("event %+v, want an alert", ev)
	}
	var a alert.Alert
	if err := json.Unmarshal([]byte(ev.data), &a); err != nil {
		t.Fatalf("event data %q: %v", ev.data, err)
	}
	if ev.id != strconv.FormatUint(a.Seq, 10) {
		t.Errorf("event id %q, alert seq %d", ev.id, a.Seq)
	}
	return a
}

func openStream(t testing.TB, env *testEnv, ctx context.Context) (*http.Response, *sseReader) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.http.URL+"/v1/alerts/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := env.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" ||
		res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("stream response %d %v", res.StatusCode, res.Header)
	}
	return res, &sseReader{r: bufio.NewReader(res.Body)}
}

func TestAlertStream(t *testing.T) {
	t.Parallel()
	env, m := newAlertEnv(t, api.Options{})
	fire(t, m, alert.Alert{ID: "drift/balances", Kind: alert.KindDrift, Subject: "balances", Summary: "3 keys differ",
		Details: json.RawMessage("{\n  \"keys\": [\"k1\",\n \"k2\"]\n}")})
	fire(t, m, alert.Alert{ID: "store/balances", Kind: alert.KindStoreError, Subject: "balances", Summary: "timeout"})
	fire(t, m, alert.Alert{ID: "integrity/payments.0/gap", Kind: alert.KindIntegrity, Subject: "payments.0", Summary: "gap"})
	if err := m.Resolve("store/balances"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, stream := openStream(t, env, ctx)
	defer res.Body.Close()

	// The snapshot: the firing alerts.
	a := stream.alert(t)
	if a.ID != "drift/balances" || a.State != alert.StateFiring || string(a.Details) != `{"keys":["k1","k2"]}` {
		t.Errorf("snapshot[0] = %+v", a)
	}
	if a := stream.alert(t); a.ID != "integrity/payments.0/gap" || a.State != alert.StateFiring {
		t.Errorf("snapshot[1] = %+v", a)
	}

	// Live changes.
	fire(t, m, alert.Alert{ID: "drift/orders", Kind: alert.KindDrift, Subject: "orders", Summary: "1 key differs"})
	if a := stream.alert(t); a.ID != "drift/orders" || a.State != alert.StateFiring || a.Seq != 5 {
		t.Errorf("live fire: %+v", a)
	}
	if err := m.Resolve("drift/balances"); err != nil {
		t.Fatal(err)
	}
	if a := stream.alert(t); a.ID != "drift/balances" || a.State != alert.StateResolved || a.EndsAt == nil || a.Seq != 6 {
		t.Errorf("live resolve: %+v", a)
	}

	// A second client gets the snapshot as it is now.
	res2, stream2 := openStream(t, env, ctx)
	defer res2.Body.Close()
	if a := stream2.alert(t); a.ID != "integrity/payments.0/gap" {
		t.Errorf("second snapshot[0] = %+v", a)
	}
	if a := stream2.alert(t); a.ID != "drift/orders" {
		t.Errorf("second snapshot[1] = %+v", a)
	}

	// The first client goes; the second still gets changes.
	res.Body.Close()
	fire(t, m, alert.Alert{ID: "drift/x", Kind: alert.KindDrift, Subject: "x", Summary: "x"})
	if a := stream2.alert(t); a.ID != "drift/x" {
		t.Errorf("after the other client left: %+v", a)
	}

	// Closing the manager (server shut-down) ends the stream cleanly.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream2.next(); err != io.EOF {
		t.Errorf("after Close: %+v, %v; want EOF", ev, err)
	}
}

// TestAlertStreamKeepalive: an idle stream sends a comment line every
// StreamKeepalive, again and again.
func TestAlertStreamKeepalive(t *testing.T) {
	t.Parallel()
	env, _ := newAlertEnv(t, api.Options{Limits: api.Limits{StreamKeepalive: 20 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, stream := openStream(t, env, ctx)
	defer res.Body.Close()
	for i := 0; i < 3; i++ {
		ev, err := stream.next()
		if err != nil {
			t.Fatalf("keepalive %d: %v", i, err)
		}
		if !ev.comment || ev.event != "" || ev.data != "" {
			t.Errorf("idle stream sent %+v, want a comment", ev)
		}
	}
}

package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/auditd/auditd/alert"
)

// receiver is a webhook receiver on loopback. respond decides the status
// of each request (numbered from 0); it may block.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	got     chan []byte // each request's body
}

func newReceiver(t testing.TB, respond func(n int, w http.ResponseWriter)) *receiver {
	t.Helper()
	rc := &receiver{got: make(chan []byte, 1000)}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		if r.Method != http.MethodPost {
			t.Errorf("receiver: method %s", r.Method)
		}
		rc.mu.Lock()
		n := len(rc.bodies)
		rc.bodies = append(rc.bodies, b)
		rc.headers = append(rc.headers, r.Header.Clone())
		rc.mu.Unlock()
		rc.got <- b
		if respond != nil {
			respond(n, w)
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.bodies)
}

func (rc *receiver) next(t testing.TB) []byte {
	t.Helper()
	select {
	case b := <-rc.got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("receiver: no request within 10s")
		return nil
	}
}

// fastWebhook is a webhook to rc that retries quickly.
func fastWebhook(rc *receiver, name string) *alert.Webhook {
	return alert.NewWebhook(alert.WebhookConfig{
		Name: name, URL: rc.srv.URL + "/hook", MaxRetries: 3,
		InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
	})
}

// waitFor polls cond for up to 10s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestWebhookPayload(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	hook := alert.NewWebhook(alert.WebhookConfig{
		Name: "am-bridge", URL: rc.srv.URL + "/hook", ExternalURL: "https://auditd.example/",
		Headers: map[string]string{"Authorization": "Bearer s3cret"},
	})
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{hook}})
	a := alert.Alert{
		ID: "integrity/payments.0/offset_conflict?", Kind: alert.KindIntegrity, Subject: "payments.0",
		Summary: `offset 7 has two events: "a" & <b>`,
		Labels:  map[string]string{"severity": "critical"},
		Details: json.RawMessage(`{"offset": 7, "ids": ["a", "b"]}`),
	}
	e.fire(a)
	body := rc.next(t)

	var msg map[string]any
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatalf("payload %s: %v", body, err)
	}
	wantKeys := []string{"alerts", "commonAnnotations", "commonLabels", "externalURL", "groupKey", "groupLabels", "receiver", "status", "truncatedAlerts", "version"}
	if got := keys(msg); !reflect.DeepEqual(got, wantKeys) {
		t.Errorf("message fields %v, want %v", got, wantKeys)
	}
	wantLabels := map[string]any{
		"alertname": "AuditdIntegrity", "kind": "integrity", "subject": "payments.0",
		"id": "integrity/payments.0/offset_conflict?", "severity": "critical",
	}
	wantAnnotations := map[string]any{
		"summary": `offset 7 has two events: "a" & <b>`,
		"details": `{"offset":7,"ids":["a","b"]}`,
	}
	for field, want := range map[string]any{
		"version":           "4",
		"groupKey":          `{}:{alertname="AuditdIntegrity", id="integrity/payments.0/offset_conflict?", kind="integrity", subject="payments.0"}`,
		"truncatedAlerts":   float64(0),
		"status":            "firing",
		"receiver":          "am-bridge",
		"externalURL":       "https://auditd.example",
		"groupLabels":       map[string]any{"alertname": "AuditdIntegrity", "kind": "integrity", "subject": "payments.0", "id": "integrity/payments.0/offset_conflict?"},
		"commonLabels":      wantLabels,
		"commonAnnotations": wantAnnotations,
	} {
		if !reflect.DeepEqual(msg[field], want) {
			t.Errorf("%s = %#v, want %#v", field, msg[field], want)
		}
	}
	alerts, _ := msg["alerts"].([]any)
	if len(alerts) != 1 {
		t.Fatalf("alerts = %#v, want one", msg["alerts"])
	}
	am := alerts[0].(map[string]any)
	if got, want := keys(am), []string{"annotations", "endsAt", "fingerprint", "generatorURL", "labels", "startsAt", "status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("alert fields %v, want %v", got, want)
	}
	// The fingerprint is Alertmanager's: that of the label set.
	ls := model.LabelSet{}
	for k, v := range wantLabels {
		ls[model.LabelName(k)] = model.LabelValue(v.(string))
	}
	for field, want := range map[string]any{
		"status":       "firing",
		"labels":       wantLabels,
		"annotations":  wantAnnotations,
		"startsAt":     "2026-03-01T12:00:00Z",
		"endsAt":       "0001-01-01T00:00:00Z",
		"generatorURL": "https://auditd.example/v1/alerts/integrity/payments.0/offset_conflict%3F",
		"fingerprint":  ls.Fingerprint().String(),
	} {
		if !reflect.DeepEqual(am[field], want) {
			t.Errorf("alerts[0].%s = %#v, want %#v", field, am[field], want)
		}
	}
	group := model.LabelSet{"alertname": "AuditdIntegrity", "kind": "integrity", "subject": "payments.0", "id": "integrity/payments.0/offset_conflict?"}
	if gk := msg["groupKey"]; gk != "{}:"+group.String() {
		t.Errorf("groupKey %v is not the Prometheus rendering of the group labels", gk)
	}
	rc.mu.Lock()
	h := rc.headers[0]
	rc.mu.Unlock()
	if h.Get("Content-Type") != "application/json" || h.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("request headers %v", h)
	}

	// Resolution: status resolved, endsAt set, same fingerprint.
	e.clock.Add(90*time.Second + 500*time.Millisecond)
	if err := e.m.Resolve(a.ID); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Status string `json:"status"`
		Alerts []struct {
			Status      string    `json:"status"`
			StartsAt    time.Time `json:"startsAt"`
			EndsAt      time.Time `json:"endsAt"`
			Fingerprint string    `json:"fingerprint"`
		} `json:"alerts"`
	}
	body = rc.next(t)
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != "resolved" || len(res.Alerts) != 1 || res.Alerts[0].Status != "resolved" ||
		!res.Alerts[0].EndsAt.Equal(newClock().Now().Add(90*time.Second+500*time.Millisecond)) ||
		res.Alerts[0].Fingerprint != ls.Fingerprint().String() {
		t.Errorf("resolved message %s", body)
	}
}

func TestWebhookRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		statuses []int // by attempt; 200 after the end
		requests int
		result   string
	}{
		{"500 twice then 200", []int{500, 500}, 3, "delivered"},
		{"429 then 200", []int{429}, 2, "delivered"},
		{"400 is not retried", []int{400}, 1, "failed"},
		{"404 is not retried", []int{404}, 1, "failed"},
		{"503 until out of retries", []int{503, 503, 503, 503, 503}, 4, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, func(n int, w http.ResponseWriter) {
				if n < len(tc.statuses) {
					w.WriteHeader(tc.statuses[n])
				}
			})
			e := newEnv(t, alert.Options{Sinks: []alert.Sink{fastWebhook(rc, "hook")}})
			e.fire(drift("balances", "3 keys differ"))
			waitFor(t, "a result", func() bool {
				return notifications(t, e.m, "hook", "delivered")+notifications(t, e.m, "hook", "failed") > 0
			})
			if got := notifications(t, e.m, "hook", tc.result); got != 1 {
				t.Errorf("%s notifications = %v, want 1", tc.result, got)
			}
			// The result is counted once Notify has returned, after its
			// last attempt: no attempt can follow (Flush makes sure the
			// queue holds nothing else either).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e.m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if n := rc.requests(); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			rc.mu.Lock()
			defer rc.mu.Unlock()
			for i, b := range rc.bodies {
				if string(b) != string(rc.bodies[0]) {
					t.Errorf("attempt %d sent a different body:\n%s\n%s", i, b, rc.bodies[0])
				}
			}
		})
	}
}

func TestWebhookRetryAfter(t *testing.T) {
	start := time.Now()
	rc := newReceiver(t, func(n int, w http.ResponseWriter) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	hook := alert.NewWebhook(alert.WebhookConfig{URL: rc.srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Second})
	e := newEnv(t, alert.Options{})
	a := e.fire(drift("balances", "x"))
	if err := hook.Notify(context.Background(), []alert.Alert{a}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("retried after %v, before Retry-After", d)
	}
}

func TestWebhookNotifyContext(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter) { w.WriteHeader(500) })
	hook := alert.NewWebhook(alert.WebhookConfig{URL: rc.srv.URL, MaxRetries: 100, InitialBackoff: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	e := newEnv(t, alert.Options{})
	a := e.fire(drift("balances", "x"))
	start := time.Now()
	if err := hook.Notify(ctx, []alert.Alert{a}); err == nil {
		t.Fatal("Notify succeeded against a failing receiver")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Notify took %v after its context ended", d)
	}
	if err := alert.NewWebhook(alert.WebhookConfig{URL: "ftp://x"}).Notify(context.Background(), []alert.Alert{a}); err == nil {
		t.Error("Notify to an ftp URL succeeded")
	}
}

func TestSlowReceiverDoesNotBlockFire(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter) { <-release })
	e := newEnv(t, alert.Options{
		Sinks:     []alert.Sink{alert.NewWebhook(alert.WebhookConfig{Name: "slow", URL: rc.srv.URL, Timeout: time.Minute})},
		QueueSize: 4,
	})
	e.fire(drift("balances", "first"))
	rc.next(t) // the first is stuck in the receiver
	start := time.Now()
	const n = 50
	for i := range n {
		e.fire(drift("balances", time.Duration(i).String()))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d fires against a blocked receiver took %v", n, d)
	}
	if dropped := notifications(t, e.m, "slow", "dropped"); dropped != n-4 {
		t.Errorf("dropped %v notifications, want %d (all but a full queue)", dropped, n-4)
	}
	close(release)
	waitFor(t, "the queue to drain", func() bool { return notifications(t, e.m, "slow", "delivered") == 5 })
}

func TestCloseDrains(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter) { time.Sleep(20 * time.Millisecond) })
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{fastWebhook(rc, "hook")}})
	for _, s := range []string{"a", "b", "c"} {
		e.fire(drift(s, s))
	}
	m := e.m
	e.close()
	if n := rc.requests(); n != 3 {
		t.Errorf("%d notifications delivered by Close, want 3", n)
	}
	if v := notifications(t, m, "hook", "delivered"); v != 3 {
		t.Errorf("delivered = %v", v)
	}

	// Close gives up on a receiver that never answers.
	block := make(chan struct{})
	defer close(block)
	stuck := newReceiver(t, func(n int, w http.ResponseWriter) { <-block })
	e2 := newEnv(t, alert.Options{
		Sinks:        []alert.Sink{alert.NewWebhook(alert.WebhookConfig{Name: "stuck", URL: stuck.srv.URL, Timeout: time.Hour})},
		DrainTimeout: 100 * time.Millisecond,
	})
	e2.fire(drift("a", "a"))
	e2.fire(drift("b", "b"))
	stuck.next(t)
	m2 := e2.m
	start := time.Now()
	e2.close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with DrainTimeout 100ms", d)
	}
	if f, d := notifications(t, m2, "stuck", "failed"), notifications(t, m2, "stuck", "dropped"); f != 1 || d != 1 {
		t.Errorf("after Close: failed %v, dropped %v; want 1 and 1", f, d)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/witness"
)

// TestURLPasswordsNotShown (issue 28): serve with a peer, a witness, an
// HTTP derived store and an alert webhook, each configured with a URL that
// carries a password, each failing (connection refused, 500): the password
// is in no API answer (GET /v1/checks, /v1/logs/{log},
// /v1/derivations/{n}/runs/latest, /v1/alerts), no metric, no log line,
// no webhook body, nor the output of `auditd status` and `auditd prove`;
// the webhook receiver is still sent it (the URL used to connect keeps
// it).
func TestURLPasswordsNotShown(t *testing.T) {
	const password = "s3cr3t-PASS"
	auth := func(u string) string { return strings.Replace(u, "http://", "http://auditor:"+password+"@", 1) }
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	closed := "http://" + freeAddr(t)

	var mu sync.Mutex
	var hooks []string
	var hookAuth bool
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks = append(hooks, string(b))
		_, p, _ := r.BasicAuth()
		hookAuth = hookAuth || p == password
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)

	_, peerKey, err := note.GenerateKey(rand.Reader, "peer.example")
	if err != nil {
		t.Fatal(err)
	}
	_, witnessKey, err := witness.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), "derivations.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(`derivations:
  - name: balances
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + event.amount
    grace: 0s
    interval: 100ms
    store:
      http:
        url: %q
`, auth(failing.URL)+"/rows")), 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t)
	cfg.Derivations = []string{spec}
	cfg.Webhooks = []WebhookConfig{
		{Name: "am", URL: auth(receiver.URL) + "/hook"},
		{Name: "down", URL: auth(closed) + "/hook", MaxRetries: -1},
	}
	cfg.Checks.Peers.Interval = 100 * time.Millisecond
	cfg.Checks.Peers.List = []PeerConfig{
		{URL: auth(closed), Key: peerKey},
		{URL: auth(failing.URL), Key: peerKey, Logs: []string{"payments"}},
	}
	cfg.Witness.Witnesses = []WitnessEndpoint{{URL: auth(closed), VerifierKey: witnessKey}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := startServeLogs(t, ctx, cfg, logs)
	var base string
	for _, l := range strings.Split(logs.String(), "\n") {
		if _, a, ok := strings.Cut(l, "addr=http://"); ok {
			base = "http://" + strings.Fields(a)[0]
		}
	}
	t.Cleanup(func() { cancel(); <-done })
	if base == "" {
		t.Fatalf("no address in the log:\n%s", logs.String())
	}
	post(t, base+"/v1/logs/payments/entries?wait=checkpoint", strings.Join(verifyEvents, "\n"))

	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// Wait for each failure to be seen.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		hooked := strings.Contains(strings.Join(hooks, ""), "store_error")
		mu.Unlock()
		checks, log, run := get("/v1/checks/peers"), get("/v1/logs/payments"), get("/v1/derivations/balances/runs/latest")
		if hooked && strings.Contains(checks, `"last_error"`) && strings.Contains(log, `"last_error"`) &&
			strings.Contains(run, `"state":"error"`) && strings.Contains(logs.String(), "alert notification failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the failures:\nwebhook %v\nchecks %s\nlog %s\nrun %s", hooked, checks, log, run)
		}
		time.Sleep(20 * time.Millisecond)
	}

	var status, statusJSON bytes.Buffer
	if code := runStatus([]string{"--server", auth(base)}, &status, io.Discard); code != 0 {
		t.Errorf("status: exit %d", code)
	}
	if code := runStatus([]string{"--server", auth(base), "--json"}, &statusJSON, io.Discard); code != 0 {
		t.Errorf("status --json: exit %d", code)
	}
	var statusErr, proveOut bytes.Buffer
	runStatus([]string{"--server", auth(closed)}, io.Discard, &statusErr)
	if code := runProve([]string{"--server", auth(failing.URL), "--verifier-key", peerKey, "--log", "payments", "--id", "p-1"}, &proveOut, &proveOut); code == 0 {
		t.Errorf("prove against a server that answers 500: exit 0")
	}

	metrics := get("/metrics")
	mu.Lock()
	webhook := strings.Join(hooks, "\n")
	sentAuth := hookAuth
	mu.Unlock()
	shown := map[string]string{
		"GET /v1/checks":                           get("/v1/checks"),
		"GET /v1/logs/payments":                    get("/v1/logs/payments"),
		"GET /v1/derivations/balances/runs/latest": get("/v1/derivations/balances/runs/latest"),
		"GET /v1/derivations":                      get("/v1/derivations"),
		"GET /v1/alerts":                           get("/v1/alerts"),
		"/metrics":                                 metrics,
		"log":                                      logs.String(),
		"webhook body":                             webhook,
		"status":                                   status.String(),
		"status --json":                            statusJSON.String(),
		"status error":                             statusErr.String(),
		"prove":                                    proveOut.String(),
	}
	for what, s := range shown {
		if strings.Contains(s, password) {
			i := strings.Index(s, password)
			t.Errorf("%s shows the password: ...%s...", what, s[max(0, i-200):min(len(s), i+100)])
		}
	}
	if !strings.Contains(metrics, `peer="http://auditor:xxxxx@`) {
		t.Errorf("metrics do not label the peers by their redacted URL")
	}
	if !strings.Contains(shown["GET /v1/alerts"], "store_error/balances") {
		t.Errorf("GET /v1/alerts lacks the store_error alert: %s", shown["GET /v1/alerts"])
	}
	if !sentAuth {
		t.Error("the webhook receiver was not sent the URL's password")
	}
}

// TestPeersConfigHidesURLPassword (issue 28): a refused peer names its URL
// without the password.
func TestPeersConfigHidesURLPassword(t *testing.T) {
	const u = "http://auditor:s3cr3t-PASS@b:1"
	for name, pc := range map[string]PeerConfig{
		"no key":  {URL: u},
		"bad key": {URL: u, Key: "b.example+nothex+AAAA"},
	} {
		_, err := PeersConfig{List: []PeerConfig{pc}}.peers(nil)
		if err == nil || strings.Contains(err.Error(), "s3cr3t-PASS") || !strings.Contains(err.Error(), "auditor:xxxxx@b:1") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

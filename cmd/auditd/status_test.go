package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestStatusAndAlertsCommands runs serve in-process with reads behind a
// token, 1,001 empty logs besides payments (past the 1,000-log page of GET
// /v1/logs), and a derivation whose PostgreSQL table is wrong for bob.
// `auditd alerts --follow` sees the drift alert fire and, once the table is
// fixed, resolve, live; `auditd status` shows the logs, the derivation in
// drift, the checks and the firing alert; `auditd alerts` lists it; without
// the token both say the server protects reads.
func TestStatusAndAlertsCommands(t *testing.T) {
	tb := newVerifyTable(t)
	tb.set(map[string]int64{"alice": 70, "bob": 74, "carol": 7})
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{extra: ""})
	b, _ := os.ReadFile(spec)
	if err := os.WriteFile(spec, bytes.Replace(b, []byte("    grace: 0s\n"), []byte("    grace: 0s\n    confirm_runs: 1\n    interval: 100ms\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "read-secret"
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen, cfg.ReadToken = t.TempDir(), "127.0.0.1:0", token
	cfg.CheckpointInterval = 10 * time.Millisecond
	cfg.Derivations = []string{spec}
	for i := 0; i < 1001; i++ {
		cfg.Logs = append(cfg.Logs, fmt.Sprintf("empty-%04d", i))
	}
	cfg.MaxMetricLogs = 2000
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })
	url := "http://" + addr

	// Follow the alerts from before anything happens.
	follow := &syncBuffer{}
	fctx, fcancel := context.WithCancel(context.Background())
	fdone := make(chan error, 1)
	go func() {
		fdone <- followAlerts(fctx, &statusClient{base: url, token: token, http: &http.Client{}}, follow, io.Discard, false)
	}()
	defer func() { fcancel(); <-fdone }()

	req, _ := http.NewRequest(http.MethodPost, url+"/v1/logs/payments/entries?wait=checkpoint", strings.NewReader(strings.Join(verifyEvents, "\n")))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %s", resp.Status)
	}
	firing := regexp.MustCompile(`(?m)^\S+  FIRING    drift      warning   drift/balances  `)
	waitText(t, follow, "the drift alert firing in alerts --follow", firing)

	var out, errb bytes.Buffer
	if code := runStatus([]string{"--server", url, "--token", token}, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	table := out.String()
	for _, re := range []string{
		`(?m)^payments\s+5\s+5\s+-\s+ok$`,
		`(?m)^empty-1000\s+0\s+0\s+-\s+ok$`,
		`(?m)^balances\s+postgres\s+drift( \(running\))?\s+\S+ ago\s+1\s+0\s+0$`, // confirmed, pending, skipped
		`(?m)^scrub\s+\S+`,
		`(?m)^drift/balances\s+drift\s+warning\s+\S+ ago\s+.*balances`,
	} {
		if !regexp.MustCompile(re).MatchString(table) {
			t.Errorf("status table lacks %s:\n%s", re, table)
		}
	}
	out.Reset()
	if code := runStatus([]string{"--server", url, "--read-token", token, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errb.String())
	}
	var st struct {
		Logs        []struct{ Name string }
		Derivations []struct {
			Name      string
			LastState string `json:"last_state"`
		}
		Checks []struct{ Name string }
		Alerts []struct{ ID string }
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if len(st.Logs) != 1002 || len(st.Derivations) != 1 || st.Derivations[0].LastState != "drift" || len(st.Checks) == 0 ||
		len(st.Alerts) != 1 || st.Alerts[0].ID != "drift/balances" {
		t.Errorf("status --json: %d logs, derivations %+v, %d checks, alerts %+v", len(st.Logs), st.Derivations, len(st.Checks), st.Alerts)
	}

	out.Reset()
	if code := runAlerts([]string{"--server", url, "--token", token}, &out, &errb); code != 0 ||
		!regexp.MustCompile(`(?m)^drift/balances\s+firing\s+drift\s+warning\s`).MatchString(out.String()) {
		t.Errorf("alerts: exit %d:\n%s%s", code, out.String(), errb.String())
	}
	for _, run := range []func([]string, io.Writer, io.Writer) int{runStatus, runAlerts} {
		out.Reset()
		errb.Reset()
		if code := run([]string{"--server", url, "--token", ""}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "pass --token") {
			t.Errorf("without the token: exit %d, %q", code, errb.String())
		}
	}

	// Fix the table: the next run is clean and the follower sees the alert
	// resolve without asking again.
	tb.set(verifyBalances)
	waitText(t, follow, "the drift alert resolving in alerts --follow", regexp.MustCompile(`(?m)^\S+  RESOLVED  drift      warning   drift/balances  `))
}

func waitText(t *testing.T, b *syncBuffer, what string, re *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !re.MatchString(b.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 60s for %s; got:\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

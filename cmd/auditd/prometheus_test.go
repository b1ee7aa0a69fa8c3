package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestPrometheusAlertsFire runs a real Prometheus (Debian's prometheus
// package) scraping the real auditd binary every 250ms, with the shipped
// dashboards/alerts.yml loaded unchanged (the rules driven here have no
// for: clause, so no shortened copy is needed). It injects an integrity
// violation (an event id reused with different content, the first
// violation the log has seen: a counter series that appears at 1) and a
// confirmed drift (a PostgreSQL table whose balance of bob is wrong,
// checked by a derivation with confirm_runs 1 and no grace), and waits
// until Prometheus's own /api/v1/alerts shows AuditdIntegrityViolation and
// AuditdDerivedViewDrift firing, with their summary, description and
// runbook_url rendered, and no other alert firing. Then it stops the
// daemon, flips a byte of a stored payload in Pebble, starts it again with
// a short scrub interval, and waits for AuditdSelfAuditFinding.
func TestPrometheusAlertsFire(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is not installed (CI=true; .ci/run installs Debian's prometheus package): %v", err)
		}
		t.Skip("prometheus is not installed (apt-get install prometheus); CI runs this test")
	}
	if testing.Short() {
		t.Skip("starts Prometheus and the daemon (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)

	tb := newVerifyTable(t)
	tb.set(map[string]int64{"alice": 70, "bob": 74, "carol": 7}) // bob is 75 in the ledger
	dir := t.TempDir()
	spec := filepath.Join(dir, "derivations.yaml")
	writeFile(t, spec, fmt.Sprintf(`derivations:
  - name: balances
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + event.amount
    grace: 0s
    confirm_runs: 1
    interval: 200ms
    store:
      postgres:
        dsn: %q
        table: %s
`, verifyPG(), tb.name))
	conf := filepath.Join(dir, "auditd.yaml")
	writeFile(t, conf, fmt.Sprintf("data_dir: %s\nderivations: [%s]\n", filepath.Join(dir, "data"), spec))
	listen := freePort(t) // kept across the restart: Prometheus scrapes one target
	start := func(run int, more ...string) *daemon {
		t.Helper()
		d, err := startDaemonArgs(ctx, bin, run, append([]string{"serve", "--config", conf, "--listen", listen,
			"--checkpoint-interval", "20ms", "--log-format", "text"}, more...)...)
		if err != nil {
			t.Fatalf("start auditd: %v", err)
		}
		t.Cleanup(d.kill)
		return d
	}
	d := start(1)

	prom := startPrometheus(t, ctx, promBin, strings.TrimPrefix(d.url, "http://"))
	// The first scrapes see the daemon before anything went wrong.
	waitProm(t, ctx, prom, "a scrape of auditd with auditd_build_info", func() bool {
		var r struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		return promGet(ctx, prom, "/api/v1/query?query="+url.QueryEscape(`auditd_build_info{job="auditd"} == 1`), &r) == nil && len(r.Data.Result) == 1
	})

	post(t, d.url+"/v1/logs/payments/entries?wait=checkpoint", strings.Join(verifyEvents, "\n"))
	// p-1 again with other content: refused, and counted as a violation.
	resp, err := d.client.Post(d.url+"/v1/logs/payments/entries", "application/x-ndjson",
		strings.NewReader(`{"id":"p-1","payload":{"account":"alice","amount":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("POST of the reused id p-1: %s %s", resp.Status, b)
	}

	want := []string{"AuditdDerivedViewDrift", "AuditdIntegrityViolation"}
	var firing map[string]promAlert
	waitProm(t, ctx, prom, "alerts "+strings.Join(want, ", ")+" firing", func() bool {
		firing = promFiring(ctx, prom)
		for _, n := range want {
			if _, ok := firing[n]; !ok {
				return false
			}
		}
		return true
	})
	if len(firing) != len(want) {
		t.Errorf("firing %v, want only %v", sortedKeys(firing), want)
	}
	drift, viol := firing["AuditdDerivedViewDrift"], firing["AuditdIntegrityViolation"]
	if drift.Labels["derivation"] != "balances" || !strings.Contains(drift.Annotations["summary"], "1 keys") {
		t.Errorf("drift alert %+v", drift)
	}
	if viol.Labels["log"] != "payments" || viol.Labels["severity"] != "critical" {
		t.Errorf("integrity alert %+v", viol)
	}
	for _, a := range []promAlert{drift, viol} {
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if v := a.Annotations[k]; v == "" || strings.Contains(v, "error expanding") {
				t.Errorf("%s: annotation %s = %q", a.Labels["alertname"], k, v)
			}
		}
		if !strings.Contains(a.Annotations["runbook_url"], "docs/runbook.md#") {
			t.Errorf("%s: runbook_url %q does not point into docs/runbook.md", a.Labels["alertname"], a.Annotations["runbook_url"])
		}
	}

	// Stored data corrupted on disk: stop the daemon, flip a byte of
	// payments entry 2's payload in Pebble, start it again with a short
	// scrub interval; the scrub's finding fires AuditdSelfAuditFinding.
	if err := d.stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	editLedger(t, filepath.Join(dir, "data"), "payments", func(db *pebble.DB, id uint32) { flipLastByte(t, db, entryKeyOf(id, 2)) })
	start(2, "--scrub-interval", "300ms")
	var scrub promAlert
	waitProm(t, ctx, prom, "AuditdSelfAuditFinding firing", func() bool {
		var ok bool
		scrub, ok = promFiring(ctx, prom)["AuditdSelfAuditFinding"]
		return ok
	})
	if scrub.Labels["checker"] != "scrub" || scrub.Labels["kind"] != "leaf_mismatch" ||
		scrub.Annotations["runbook_url"] != "docs/runbook.md#auditdselfauditfinding" {
		t.Errorf("scrub alert %+v", scrub)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startPrometheus runs prometheus on a free loopback port with a config
// scraping target (job auditd) and evaluating dashboards/alerts.yml every
// 250ms; it returns its base URL once /-/ready answers.
func startPrometheus(t *testing.T, ctx context.Context, bin, target string) string {
	t.Helper()
	rules, err := filepath.Abs("../../dashboards/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	writeFile(t, conf, fmt.Sprintf(`global:
  scrape_interval: 250ms
  scrape_timeout: 200ms
  evaluation_interval: 250ms
rule_files: [%q]
scrape_configs:
  - job_name: auditd
    static_configs:
      - targets: [%q]
`, rules, target))
	addr := freePort(t)
	cmd := exec.Command(bin, "--config.file", conf, "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--log.level", "warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + addr
	waitProm(t, ctx, base, "prometheus to be ready", func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("prometheus exited:\n%s", b)
		default:
		}
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitProm(t *testing.T, ctx context.Context, prom, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			var r json.RawMessage
			promGet(context.Background(), prom, "/api/v1/alerts", &r)
			t.Fatalf("waited 90s for %s; Prometheus's alerts: %s", what, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func promGet(ctx context.Context, prom, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// promFiring returns the alerts Prometheus reports firing, by name.
func promFiring(ctx context.Context, prom string) map[string]promAlert {
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	out := map[string]promAlert{}
	if promGet(ctx, prom, "/api/v1/alerts", &r) != nil {
		return out
	}
	for _, a := range r.Data.Alerts {
		if a.State == "firing" {
			out[a.Labels["alertname"]] = a
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := keys(m)
	sort.Strings(out)
	return out
}

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

	// Healthy (no violation yet): every dashboard panel shows a value, or
	// the text it declares for no data (Kafka panels without Kafka, ...),
	// never Grafana's "No data".
	panels := dashboardPanels(t)
	var missing []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if missing = panelsWithoutData(ctx, prom, panels); len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("dashboard panels showing \"No data\" on a healthy daemon: %q", missing)
		}
	}
	integrityPanel := func() float64 {
		for _, p := range panels {
			if p.Title == "Integrity violations (24h)" {
				vs, err := promValues(ctx, prom, panelQuery(p.Exprs[0]))
				if err != nil || len(vs) != 1 {
					t.Fatalf("integrity panel: %v %v", vs, err)
				}
				return vs[0]
			}
		}
		t.Fatal("no panel \"Integrity violations (24h)\"")
		return 0
	}
	if v := integrityPanel(); v != 0 {
		t.Errorf("integrity panel reads %v before any violation", v)
	}
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
	// The panel counts the first violation of the log, whose counter
	// series the ledger created at 0 when the log was opened.
	waitProm(t, ctx, prom, "the integrity panel to count the violation", func() bool { return integrityPanel() >= 1 })
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
		// Prometheus's external label runbook_base_url makes the
		// runbook links absolute (without it they are docs/runbook.md#...,
		// as alerts_test.yml checks).
		if !strings.HasPrefix(a.Annotations["runbook_url"], runbookBase+"runbook.md#") {
			t.Errorf("%s: runbook_url %q does not point into %srunbook.md", a.Labels["alertname"], a.Annotations["runbook_url"], runbookBase)
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
		scrub.Annotations["runbook_url"] != runbookBase+"runbook.md#auditdselfauditfinding" {
		t.Errorf("scrub alert %+v", scrub)
	}
}

// runbookBase is the base of the runbook links the test's Prometheus is
// configured with (dashboards/README.md).
const runbookBase = "https://runbooks.example/auditd/"

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
  external_labels:
    runbook_base_url: %q
rule_files: [%q]
scrape_configs:
  - job_name: auditd
    static_configs:
      - targets: [%q]
`, runbookBase, rules, target))
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

// dashPanel is a panel of dashboards/auditd.json with its queries.
type dashPanel struct {
	Title       string
	Exprs       []string
	NoValue     string // the text the panel shows instead of "No data"
	Stat        bool
	Description string
}

// dashboardPanels reads dashboards/auditd.json's panels (rows' too).
func dashboardPanels(t *testing.T) []dashPanel {
	t.Helper()
	b, err := os.ReadFile("../../dashboards/auditd.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				NoValue string `json:"noValue"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []dashPanel
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if len(p.Panels) > 0 {
				var sub []panel
				if err := json.Unmarshal(p.Panels, &sub); err != nil {
					t.Fatal(err)
				}
				walk(sub)
			}
			if len(p.Targets) == 0 {
				continue
			}
			dp := dashPanel{Title: p.Title, NoValue: p.FieldConfig.Defaults.NoValue, Stat: p.Type == "stat"}
			for _, tg := range p.Targets {
				dp.Exprs = append(dp.Exprs, tg.Expr)
			}
			out = append(out, dp)
		}
	}
	walk(d.Panels)
	return out
}

// panelQuery is a panel's query as Grafana sends it for the dashboard's
// default variables (every instance, a 1m rate interval).
func panelQuery(expr string) string {
	return strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `1m`).Replace(expr)
}

// promValues runs an instant query and returns each series' value.
func promValues(ctx context.Context, prom, query string) ([]float64, error) {
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := promGet(ctx, prom, "/api/v1/query?query="+url.QueryEscape(query), &r); err != nil {
		return nil, err
	}
	var out []float64
	for _, s := range r.Data.Result {
		var f float64
		if str, ok := s.Value[1].(string); ok {
			fmt.Sscan(str, &f)
		}
		out = append(out, f)
	}
	return out, nil
}

// panelsWithoutData returns the panels none of whose queries return a
// series and that declare no text of their own (noValue) for that case:
// Grafana would show them as "No data".
func panelsWithoutData(ctx context.Context, prom string, panels []dashPanel) []string {
	var missing []string
	for _, p := range panels {
		if p.NoValue != "" {
			continue
		}
		any := false
		for _, e := range p.Exprs {
			if vs, err := promValues(ctx, prom, panelQuery(e)); err == nil && len(vs) > 0 {
				any = true
				break
			}
		}
		if !any {
			missing = append(missing, p.Title)
		}
	}
	return missing
}

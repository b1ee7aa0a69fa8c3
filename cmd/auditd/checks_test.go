package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// TestCheckAlerts: one alert per checker, log and kind, updated by the
// next pass, left alone by a pass that did not complete, resolved by a
// complete pass that no longer finds it; other raisers' integrity alerts
// are never touched.
func TestCheckAlerts(t *testing.T) {
	st := openLedger(t, t.TempDir())
	kv, err := st.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(kv, alert.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Another raiser's integrity alert on the same log.
	if _, err := m.Fire(alert.Alert{ID: "integrity/orders/offset_conflict", Kind: alert.KindIntegrity, Subject: "orders"}); err != nil {
		t.Fatal(err)
	}
	pass := func(complete bool, fs ...checkers.Finding) {
		t.Helper()
		pr := checkers.PassResult{Checker: "scrub", Complete: complete, Findings: fs, Counts: map[checkers.LogKind]int{}}
		for _, f := range fs {
			pr.Counts[checkers.LogKind{Log: f.Log, Kind: f.Kind}]++
		}
		if err := raiseCheckAlerts(m, pr); err != nil {
			t.Fatal(err)
		}
	}
	firing := func() map[string]alert.Alert {
		out := map[string]alert.Alert{}
		for _, a := range m.List(alert.Filter{State: alert.StateFiring}) {
			out[a.ID] = a
		}
		return out
	}
	leaf := func(log string, i uint64) checkers.Finding {
		return checkers.Finding{Log: log, Index: checkers.At(i), Kind: ledger.IntegrityLeafMismatch, Detail: "differs"}
	}
	const idOrders, idPay = "integrity/checks/scrub/orders/leaf_mismatch", "integrity/checks/scrub/pay/leaf_mismatch"
	const idTile = "integrity/checks/scrub/orders/tile_mismatch"
	pass(true, leaf("orders", 3), leaf("orders", 9), leaf("pay", 1),
		checkers.Finding{Log: "orders", Tile: "0/1", Kind: ledger.IntegrityTileMismatch})
	f := firing()
	if len(f) != 4 {
		t.Fatalf("firing after the first pass: %v", keys(f))
	}
	a := f[idOrders]
	if a.Kind != alert.KindIntegrity || a.Subject != "orders" || a.Labels["checker"] != "scrub" || a.Labels["violation"] != "leaf_mismatch" ||
		!strings.Contains(a.Summary, "2 leaf_mismatch") {
		t.Errorf("alert %+v", a)
	}
	var d struct {
		Count    int                `json:"count"`
		Findings []checkers.Finding `json:"findings"`
	}
	if err := json.Unmarshal(a.Details, &d); err != nil || d.Count != 2 || len(d.Findings) != 2 || *d.Findings[1].Index != 9 {
		t.Errorf("details %s (%v)", a.Details, err)
	}
	started := a.StartsAt

	// The next pass finds one more in orders: the same alert, updated.
	pass(true, leaf("orders", 3), leaf("orders", 9), leaf("orders", 10), leaf("pay", 1))
	f = firing()
	if a := f[idOrders]; !a.StartsAt.Equal(started) || !strings.Contains(a.Summary, "3 leaf_mismatch") {
		t.Errorf("updated alert %+v", a)
	}
	if _, ok := f[idTile]; ok {
		t.Error("the tile alert a complete pass no longer found still fires")
	}
	// A failed pass that found nothing before failing resolves nothing.
	pass(false)
	if f = firing(); len(f) != 3 {
		t.Errorf("after an incomplete pass: %v", keys(f))
	}
	// A clean complete pass resolves the checker's alerts, not the others.
	pass(true)
	f = firing()
	if len(f) != 1 || f["integrity/orders/offset_conflict"].ID == "" {
		t.Errorf("after a clean pass: %v", keys(f))
	}
	if a, _ := m.Get(idPay); a.State != alert.StateResolved {
		t.Errorf("pay alert %+v", a)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// editLedger opens a stopped daemon's Pebble directly and runs fn with the
// id of the named log (key layout: ledger/keys.go).
func editLedger(t *testing.T, dir, log string, fn func(db *pebble.DB, id uint32)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(append([]byte{'n'}, log...))
	if err != nil {
		t.Fatalf("log %s: %v", log, err)
	}
	id := binary.BigEndian.Uint32(v)
	closer.Close()
	fn(db, id)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func entryKeyOf(id uint32, i uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32([]byte{'e'}, id), i)
}

// flipLastByte flips a bit of the last byte of the value at key (an
// entry's payload ends its stored value); flipping it again restores it.
func flipLastByte(t *testing.T, db *pebble.DB, key []byte) {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte(nil), v...)
	closer.Close()
	b[len(b)-1] ^= 0x01
	if err := db.Set(key, b, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TestServeScrubFindsFault runs the daemon on a data dir where one entry's
// payload byte was flipped on disk: the scheduled scrub finds it, raises
// the integrity alert, shows the finding in GET /v1/checks and the gauge in
// /metrics; after a restart the finding is still there before any pass;
// once the byte is restored, a pass asked for over HTTP resolves it all.
func TestServeScrubFindsFault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	args := func(interval string) []string {
		return []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--checkpoint-interval", "20ms",
			"--log-format", "text", "--scrub-interval", interval}
	}
	run := 0
	start := func(interval string) *daemon {
		t.Helper()
		run++
		d, err := startDaemonArgs(ctx, bin, run, args(interval)...)
		if err != nil {
			t.Fatalf("start %d: %v", run, err)
		}
		t.Cleanup(d.kill)
		return d
	}
	stop := func(d *daemon) {
		t.Helper()
		if err := d.stop(ctx); err != nil {
			t.Fatalf("stop: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
		}
	}

	// 1. Load two logs past a tile boundary, with no scrub.
	d := start("0")
	const n = 700
	for _, log := range []string{"orders", "pay"} {
		var body strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&body, `{"id":"%s-%d","payload":{"amount":%d}}`+"\n", log, i, i)
		}
		resp, err := d.client.Post(d.url+"/v1/logs/"+log+"/entries?wait=checkpoint", "application/x-ndjson", strings.NewReader(body.String()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", log, resp.Status)
		}
	}
	stop(d)

	// 2. Flip a payload byte of orders entry 513 (third tile).
	const bad = 513
	editLedger(t, dir, "orders", func(db *pebble.DB, id uint32) { flipLastByte(t, db, entryKeyOf(id, bad)) })

	// 3. A short scrub interval: the scrub finds it.
	d = start("300ms")
	const alertID = "integrity/checks/scrub/orders/leaf_mismatch"
	var a alert.Alert
	waitFor(t, ctx, d, "the integrity alert", func() bool {
		code, body, err := d.get(ctx, "/v1/alerts/"+alertID)
		if err != nil || code != http.StatusOK {
			return false
		}
		return json.Unmarshal(body, &a) == nil && a.State == alert.StateFiring
	})
	if a.Kind != alert.KindIntegrity || a.Subject != "orders" || a.Labels["checker"] != "scrub" {
		t.Errorf("alert %+v", a)
	}
	check := scrubStatus(t, ctx, d)
	if len(check.Findings) != 1 || check.Findings[0].Log != "orders" || check.Findings[0].Index == nil ||
		*check.Findings[0].Index != bad || check.Findings[0].Kind != ledger.IntegrityLeafMismatch {
		t.Fatalf("GET /v1/checks findings: %+v", check.Findings)
	}
	if check.LastRun == nil || check.LastRun.EntriesChecked != 2*n {
		t.Errorf("last run %+v, want %d entries checked", check.LastRun, 2*n)
	}
	gauge := `auditd_checks_findings{checker="scrub",kind="leaf_mismatch"}`
	if v := metric(t, ctx, d, gauge); v != "1" {
		t.Errorf("%s = %q, want 1", gauge, v)
	}
	stop(d)

	// 4. Restore the byte; restart with a long interval so that no pass
	// runs by itself: the finding and the alert persist.
	editLedger(t, dir, "orders", func(db *pebble.DB, id uint32) { flipLastByte(t, db, entryKeyOf(id, bad)) })
	d = start("1h")
	if check := scrubStatus(t, ctx, d); len(check.Findings) != 1 || check.State != "idle" {
		t.Errorf("after a restart: %+v", check)
	}
	if v := metric(t, ctx, d, gauge); v != "1" {
		t.Errorf("after a restart: %s = %q, want 1", gauge, v)
	}

	// 5. A pass on demand: clean, so the alert resolves.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/checks/scrub/run", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST run: %s", resp.Status)
	}
	waitFor(t, ctx, d, "the alert to resolve", func() bool {
		code, body, err := d.get(ctx, "/v1/alerts/"+alertID)
		return err == nil && code == http.StatusOK && json.Unmarshal(body, &a) == nil && a.State == alert.StateResolved
	})
	if check := scrubStatus(t, ctx, d); len(check.Findings) != 0 || check.LastRun.Result != checkers.ResultOK {
		t.Errorf("after the clean pass: %+v", check)
	}
	if v := metric(t, ctx, d, gauge); v != "0" {
		t.Errorf("after the clean pass: %s = %q, want 0", gauge, v)
	}
	stop(d)
}

func waitFor(t *testing.T, ctx context.Context, d *daemon, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waited 60s for %s; daemon %s\n%s", what, d.exitStatus(), strings.Join(d.stderr.lines(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scrubStatus(t *testing.T, ctx context.Context, d *daemon) checkers.Status {
	t.Helper()
	var out struct {
		Checks []checkers.Status `json:"checks"`
	}
	if err := d.getJSON(ctx, "/v1/checks", &out); err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Checks {
		if c.Name == "scrub" {
			return c
		}
	}
	t.Fatalf("no scrub in GET /v1/checks: %+v", out.Checks)
	return checkers.Status{}
}

// metric returns the value of the series in /metrics, "" if absent.
func metric(t *testing.T, ctx context.Context, d *daemon, series string) string {
	t.Helper()
	text, err := d.getText(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestChecksConfig: the checks: section, its defaults, the flags over it,
// and the schedules serve derives from them.
func TestChecksConfig(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/c.yaml"
	os.WriteFile(file, []byte("checks:\n  scrub_interval: 6h\n  scrub_rate: 1000\n  checkpoint_audit_interval: 0s\n"), 0o644)
	c, err := loadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Checks
	if ch.ScrubInterval != 6*time.Hour || ch.ScrubRate != 1000 || ch.CheckpointAuditInterval != 0 ||
		ch.CheckpointAuditRate != 250 || ch.Jitter != 15*time.Minute {
		t.Errorf("checks from the file over the defaults: %+v", ch)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--scrub-interval", "0", "--scrub-rate", "20"}); err != nil {
		t.Fatal(err)
	}
	if c.Checks.ScrubInterval != 0 || c.Checks.ScrubRate != 20 {
		t.Errorf("flags: %+v", c.Checks)
	}
	if d := defaultConfig().Checks; d.ScrubInterval != 24*time.Hour || d.ScrubRate != 20_000 || d.CheckpointAuditInterval != time.Hour {
		t.Errorf("defaults %+v", d)
	}
	neg := defaultConfig()
	neg.Checks.ScrubRate = -1
	if err := neg.validate(); err == nil {
		t.Error("a negative scrub rate was accepted")
	}
	os.WriteFile(file, []byte("checks:\n  scrub_intervall: 6h\n"), 0o644)
	if _, err := loadConfig(file); err == nil {
		t.Error("an unknown checks field was accepted")
	}

	st := openLedger(t, t.TempDir())
	k, _, err := loadOrCreateKey(filepath.Join(t.TempDir(), "k"), "x")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]checkers.Schedule{}
	for _, sc := range daemonCheckers(st, k.verifier, ChecksConfig{ScrubInterval: 24 * time.Hour, ScrubRate: 20_000,
		CheckpointAuditInterval: time.Minute, CheckpointAuditRate: 1000, Jitter: 15 * time.Minute}) {
		got[sc.checker.Name()] = sc.schedule
	}
	if s := got["scrub"]; s != (checkers.Schedule{Interval: 24 * time.Hour, Jitter: 15 * time.Minute, Rate: 20_000}) {
		t.Errorf("scrub schedule %+v", s)
	}
	if s := got["checkpoints"]; s != (checkers.Schedule{Interval: time.Minute, Jitter: 6 * time.Second, Rate: 1000}) {
		t.Errorf("checkpoint audit schedule %+v (the jitter is capped at a tenth of the interval)", s)
	}
}

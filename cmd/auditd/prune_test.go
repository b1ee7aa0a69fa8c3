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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive/spec"
)

// pruneStore makes a data dir with a key and a log "orders" of n entries,
// closed.
func pruneStore(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "auditd.key")
	if err := writeNewKey(key, "prune.test"); err != nil {
		t.Fatal(err)
	}
	k, _, err := loadOrCreateKey(key, "prune.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.CreateLog("orders")
	if err != nil {
		t.Fatal(err)
	}
	var es []ledger.Entry
	for i := range n {
		es = append(es, ledger.Entry{ID: fmt.Sprintf("o-%d", i), Payload: []byte(fmt.Sprintf(`{"order":%d}`, i)), PayloadJSON: true})
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(context.Background(), uint64(n)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func runPruneTest(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runPrune(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestPruneCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	pruneStore(t, dir, 1500)
	code, out, errs := runPruneTest("--data-dir", dir, "--log", "orders", "--before", "1000", "--dry-run")
	if code != 0 || !strings.Contains(out, "would prune the payloads of 1000 entries") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runPruneTest("--data-dir", dir, "--log", "orders", "--before", "1000", "--batch", "256")
	if code != 0 || !strings.Contains(out, "pruned the payloads of 1000 entries") || !strings.Contains(out, "watermark 0 -> 1000 (latest signed checkpoint 1500)") {
		t.Fatalf("prune: exit %d\n%s%s", code, out, errs)
	}
	// Again: nothing left to do below 1000.
	if code, out, errs = runPruneTest("--data-dir", dir, "--log", "orders", "--before", "1000"); code != 0 || !strings.Contains(out, "of 0 entries") {
		t.Fatalf("prune again: exit %d\n%s%s", code, out, errs)
	}
	// fsck checks the pruned log clean.
	var fout, ferr bytes.Buffer
	if code := runFsck([]string{"--data-dir", dir, "--quiet"}, &fout, &ferr); code != fsckClean {
		t.Fatalf("fsck after prune: exit %d\n%s%s", code, fout.String(), ferr.String())
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--data-dir", dir, "--log", "nosuch", "--before", "10"}, 1, `no log "nosuch"`},
		{[]string{"--data-dir", dir, "--log", "orders", "--before", "yesterday"}, 2, "want an entry index, an RFC 3339 time or a positive age"},
		{[]string{"--data-dir", dir, "--log", "orders"}, 2, "--before are required"},
		{[]string{"--data-dir", filepath.Join(dir, "none"), "--log", "orders", "--before", "1"}, 1, "no ledger in"},
	} {
		if code, out, errs := runPruneTest(tc.args...); code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("prune %q: exit %d, want %d with %q\n%s%s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
}

// The ledger's lock refuses an offline prune while the daemon holds the
// data dir, with a message that says so.
func TestPruneCommandRefusesRunningDaemon(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	pruneStore(t, dir, 10)
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "prune.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	code, out, errs := runPruneTest("--data-dir", dir, "--log", "orders", "--before", "5")
	if code != 1 || !strings.Contains(errs, "LOCK is held by another process") {
		t.Fatalf("prune on a held data dir: exit %d\n%s%s", code, out, errs)
	}
}

func TestRetentionConfigDerivationSource(t *testing.T) {
	dir := t.TempDir()
	specFile := filepath.Join(dir, "d.yaml")
	if err := os.WriteFile(specFile, []byte(`derivations:
  - name: order-totals
    sources: ["orders.*"]
    key: event.account
    initial: "0"
    step: state + 1
    store:
      postgres: {dsn: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", table: t}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// serve allows a policy on a derivation's source: it snapshots the
	// derivation before pruning (TestServeRetentionSnapshotsDerivation).
	for _, log := range []string{"orders.eu", "orders.*", "payments", "*.eu"} {
		cfg := testConfig(t)
		cfg.Derivations = []string{specFile}
		cfg.Retention = RetentionConfig{Logs: []RetentionLogConfig{{Log: log, MaxAge: time.Hour}}}
		if err := cfg.validate(); err != nil {
			t.Errorf("policy on %s: %v", log, err)
		}
	}
	// auditd prune --config (offline, no snapshot) refuses a derivation's source.
	// auditd prune --config refuses the same log.
	conf := filepath.Join(dir, "auditd.yaml")
	if err := os.WriteFile(conf, []byte("data_dir: "+filepath.Join(dir, "data")+"\nderivations: ["+specFile+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runPruneTest("--config", conf, "--log", "orders.eu", "--before", "10"); code != 1 || !strings.Contains(errs, `derivation "order-totals" reads log orders.eu`) {
		t.Errorf("prune --config of a derivation's source: exit %d\n%s%s", code, out, errs)
	}
	cfg := testConfig(t)
	cfg.Retention = RetentionConfig{Logs: []RetentionLogConfig{{Log: "x"}}}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "set max_age") {
		t.Errorf("policy without a limit: %v", err)
	}
	// The guard of each pass catches what patterns alone do not.
	specs, err := spec.Load(specFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := derivationGuard(specs)("orders.eu"); err == nil || !strings.Contains(err.Error(), `derivation "order-totals" reads log orders.eu`) {
		t.Errorf("guard on orders.eu: %v", err)
	}
	if err := derivationGuard(specs)("payments.eu"); err != nil {
		t.Errorf("guard on payments.eu: %v", err)
	}
}

// serve applies a retention policy: the first pass prunes below the newest
// keep_entries entries, served as payload_pruned, with the metrics.
func TestServeRetention(t *testing.T) {
	cfg := testConfig(t)
	pruneStore(t, cfg.DataDir, 1000)
	cfg.Retention = RetentionConfig{Interval: time.Hour, Logs: []RetentionLogConfig{{Log: "orders", KeepEntries: 100}}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(get("/metrics"), `auditd_ledger_prune_watermark_entries{log="orders"} 900`) {
		if time.Now().After(deadline) {
			t.Fatalf("no retention pass to 900\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := get("/metrics"); !strings.Contains(m, `auditd_ledger_pruned_entries_total{log="orders"} 900`) {
		t.Errorf("pruned entries metric missing:\n%s", m)
	}
	var e struct {
		PayloadPruned bool            `json:"payload_pruned"`
		Payload       json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal([]byte(get("/v1/logs/orders/entries/899")), &e); err != nil || !e.PayloadPruned || e.Payload != nil {
		t.Errorf("entry 899: %+v, %v", e, err)
	}
	e.PayloadPruned, e.Payload = false, nil
	if err := json.Unmarshal([]byte(get("/v1/logs/orders/entries/900")), &e); err != nil || e.PayloadPruned || string(e.Payload) != `{"order":900}` {
		t.Errorf("entry 900: %+v, %v", e, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A log fed by Kafka under retention: pruning leaves its source position
// alone, so the source goes on from where it was, and after a restart
// resumes from the ledger's position: every record is ledgered once.
func TestServeRetentionKafka(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := 0
	produce := func(n int) {
		for range n {
			prod.Produce(ctx, &kgo.Record{Value: []byte(fmt.Sprintf(`{"seq":%d}`, sent))}, nil)
			sent++
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.Kafka = &ingest.KafkaConfig{Brokers: cluster.ListenAddrs(), Topics: []string{"t"}, Group: "prune-test"}
	cfg.Retention = RetentionConfig{Interval: 20 * time.Millisecond, Logs: []RetentionLogConfig{{Log: "t.*", KeepEntries: 100}}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	start := func() (string, context.CancelFunc, <-chan error) {
		var logs syncBuffer
		sctx, stop := context.WithCancel(ctx)
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() { done <- serve(sctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), ready) }()
		select {
		case addr := <-ready:
			return addr, stop, done
		case err := <-done:
			t.Fatalf("serve: %v\n%s", err, logs.String())
		}
		return "", stop, done
	}
	metric := func(addr, line string) bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), line)
	}
	waitMetric := func(addr string, lines ...string) {
		t.Helper()
		for _, line := range lines {
			for !metric(addr, line) {
				if ctx.Err() != nil {
					t.Fatalf("no %s", line)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	produce(1500)
	addr, stop, done := start()
	waitMetric(addr, `auditd_ledger_log_size_entries{log="t.0"} 1500`, `auditd_ledger_prune_watermark_entries{log="t.0"} 1400`)
	produce(500)
	waitMetric(addr, `auditd_ledger_log_size_entries{log="t.0"} 2000`, `auditd_ledger_prune_watermark_entries{log="t.0"} 1900`)
	if !metric(addr, `auditd_ledger_appended_entries_total{log="t.0"} 2000`) || !metric(addr, `auditd_ledger_duplicate_entries_total{log="t.0"} 0`) {
		t.Fatal("records ledgered other than once")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Restarted: the source resumes from the ledger's position, past the
	// pruned range, and ledgers only the new records.
	produce(100)
	addr, stop, done = start()
	defer func() { stop(); <-done }()
	waitMetric(addr, `auditd_ledger_log_size_entries{log="t.0"} 2100`)
	if !metric(addr, `auditd_ledger_appended_entries_total{log="t.0"} 100`) || !metric(addr, `auditd_ledger_duplicate_entries_total{log="t.0"} 0`) {
		t.Fatal("after the restart, records ledgered other than once")
	}
	var e struct {
		Source struct{ Offset int64 } `json:"source"`
	}
	resp, err := http.Get("http://" + addr + "/v1/logs/t.0/entries/2099")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Source.Offset != 2099 {
		t.Fatalf("entry 2099: offset %d, %v", e.Source.Offset, err)
	}
}

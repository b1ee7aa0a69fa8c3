package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// TestKafkaRereadDaemon: serve with a Kafka source registers the re-read
// checkers; a topic recreated with one changed record while the daemon is
// down raises source_recreated at start (the partition stopped, the daemon
// not ready), and a full re-read on demand (POST
// /v1/checks/kafka_reread_full/run) raises the source_mismatch alert naming
// the offset.
func TestKafkaRereadDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]
	prod, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n, changed = 1500, 1234
	produce := func(changed int) {
		t.Helper()
		for i := 0; i < n; i++ {
			v := fmt.Sprintf(`{"seq":%d}`, i)
			if i == changed {
				v = `{"seq":"rewritten"}`
			}
			prod.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte(v), Timestamp: time.Unix(1700000000, 0)}, nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(-1)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "auditd.yaml")
	os.WriteFile(cfg, []byte("checks:\n  kafka_reread:\n    interval: 0s\n    rate: 0\n"), 0o600)
	run := 0
	start := func() *daemon {
		t.Helper()
		run++
		d, err := startDaemonArgs(ctx, bin, run, "serve", "--data-dir", dir+"/data", "--listen", "127.0.0.1:0", "--log-format", "text",
			"--config", cfg, "--kafka-brokers", broker, "--kafka-topics", "t")
		if err != nil {
			t.Fatalf("start %d: %v", run, err)
		}
		t.Cleanup(d.kill)
		return d
	}
	d := start()
	waitFor(t, ctx, d, "1500 entries in t.0", func() bool {
		var st struct {
			Size uint64 `json:"size"`
		}
		return d.getJSON(ctx, "/v1/logs/t.0", &st) == nil && st.Size == n
	})
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(prod)
	if _, err := adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	prod.PurgeTopicsFromClient("t")
	produce(changed)

	d = start()
	alertState := func(id string, a *alert.Alert) bool {
		code, body, err := d.get(ctx, "/v1/alerts/"+id)
		return err == nil && code == http.StatusOK && json.Unmarshal(body, a) == nil && a.State == alert.StateFiring
	}
	var a alert.Alert
	waitFor(t, ctx, d, "the source_recreated alert", func() bool { return alertState("integrity/t.0/source_recreated", &a) })
	if code, _, _ := d.get(ctx, "/readyz"); code == http.StatusOK {
		t.Errorf("GET /readyz = 200 with the partition stopped")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/checks/kafka_reread_full/run", nil)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST run: %s", resp.Status)
	}
	const id = "integrity/checks/kafka_reread_full/t.0/" + ledger.IntegritySourceMismatch
	waitFor(t, ctx, d, "the source_mismatch alert", func() bool { return alertState(id, &a) })
	var details struct {
		Findings []checkers.Finding `json:"findings"`
	}
	if err := json.Unmarshal(a.Details, &details); err != nil || len(details.Findings) != 1 || details.Findings[0].Index == nil ||
		*details.Findings[0].Index != changed || !strings.Contains(details.Findings[0].Detail, fmt.Sprintf("offset %d:", changed)) {
		t.Errorf("alert %s details %s, want the finding at offset %d", id, a.Details, changed)
	}
	if a.Labels["severity"] != "critical" {
		t.Errorf("alert labels %v, want severity critical", a.Labels)
	}
	var checks struct {
		Checks []checkers.Status `json:"checks"`
	}
	if err := d.getJSON(ctx, "/v1/checks", &checks); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range checks.Checks {
		names = append(names, c.Name)
	}
	if s := strings.Join(names, ","); !strings.Contains(s, "kafka_reread,kafka_reread_full") {
		t.Errorf("checks %s, want kafka_reread and kafka_reread_full", s)
	}
	if err := d.stop(ctx); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// TestChecksScheduledLog: a check with an interval logs it; one without
// (scrub_interval: 0, run only through POST /v1/checks/{name}/run) logs
// interval=on-demand, not interval=0s.
func TestChecksScheduledLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, _, err := loadOrCreateKey(filepath.Join(dir, "auditd.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(dir, k.signer, k.verifier)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	kv, err := st.Bucket("alerts")
	if err != nil {
		t.Fatal(err)
	}
	m, err := alert.NewManager(kv, alert.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	cfg := ChecksConfig{ScrubInterval: 0, ScrubRate: 100, CheckpointAuditInterval: time.Hour, CheckpointAuditRate: 10}
	_, stop, err := startChecks(st, k.verifier, cfg, m, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	var scrub, audit string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "self-audit scheduled") {
			switch {
			case strings.Contains(l, "checker=scrub "):
				scrub = l
			case strings.Contains(l, "checker=checkpoints "):
				audit = l
			}
		}
	}
	if !strings.Contains(scrub, " interval=on-demand ") || strings.Contains(scrub, "interval=0s") {
		t.Errorf("on-demand scrub logged %q, want interval=on-demand\nlog:\n%s", scrub, out.String())
	}
	if !strings.Contains(audit, " interval=1h0m0s ") {
		t.Errorf("hourly checkpoint audit logged %q, want interval=1h0m0s\nlog:\n%s", audit, out.String())
	}
}

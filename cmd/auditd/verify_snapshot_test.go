package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/rederive"
)

// waitUntil polls cond until it holds, failing the test after 30s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The daemon snapshots a derivation before retention prunes its source,
// publishes the snapshot, and auditd verify --server --from-snapshot folds
// from it past the pruned range, after checking it; a tampered snapshot
// (a state byte flipped, another fingerprint, another signer) is refused.
func TestVerifyFromSnapshot(t *testing.T) {
	tb := newVerifyTable(t)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
	cfg.CheckpointInterval = 10 * time.Millisecond
	cfg.Derivations = []string{spec}
	cfg.Retention = RetentionConfig{Interval: 20 * time.Millisecond, Logs: []RetentionLogConfig{{Log: "payments", KeepEntries: 1}}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var url string
	select {
	case addr := <-ready:
		url = "http://" + addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	defer func() { cancel(); <-done }()
	d := &verifyDaemon{url: url, dataDir: cfg.DataDir, vkeyFile: cfg.KeyFile + ".pub"}
	post(t, url+"/v1/logs/payments/entries?wait=checkpoint", strings.Join(verifyEvents, "\n"))
	vkey, err := os.ReadFile(d.vkeyFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(url, v)
	pruned := func(i uint64) bool {
		e, err := c.Entry(context.Background(), "payments", i)
		return err == nil && e.PayloadPruned
	}
	// Nothing is pruned before the derivation has run (no snapshot).
	if pruned(0) {
		t.Fatal("entry 0 pruned before the derivation ran")
	}
	resp, err := http.Post(url+"/v1/derivations/balances/run", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitUntil(t, "the snapshot and the pruning below it", func() bool { return pruned(3) })
	if pruned(4) {
		t.Fatal("entry 4 pruned: keep_entries 1")
	}
	snapBody, err := c.DerivationSnapshot(context.Background(), "balances")
	if err != nil {
		t.Fatal(err)
	}
	var snap rederive.Snapshot
	if err := json.Unmarshal(snapBody, &snap); err != nil || snap.Size("payments") != 5 {
		t.Fatalf("snapshot: %+v, %v", snap, err)
	}

	post(t, url+"/v1/logs/payments/entries?wait=checkpoint", `{"id":"p-6","payload":{"account":"carol","amount":3}}`)
	tb.set(map[string]int64{"alice": 70, "bob": 75, "carol": 10})
	if r := runVerifyTest(t, d.remoteArgs(url, spec, "--from-snapshot")...); r.code != exitClean {
		t.Fatalf("verify --from-snapshot: %v", r)
	}
	// Without the snapshot, the fold meets the pruned payloads.
	if r := runVerifyTest(t, d.remoteArgs(url, spec)...); r.code == exitClean || !strings.Contains(r.stdout+r.stderr, "payload pruned") {
		t.Errorf("verify without the snapshot over a pruned range: %v", r)
	}

	skey, _, err := note.GenerateKey(rand.Reader, v.Name())
	if err != nil {
		t.Fatal(err)
	}
	other, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tamper func(s *rederive.Snapshot)
		want   string
	}{
		{"state byte flipped", func(s *rederive.Snapshot) { s.State[len(s.State)-3] ^= 1 }, "its state hashes to"},
		{"wrong fingerprint", func(s *rederive.Snapshot) { s.Fingerprint = "0123456789abcdef0123456789abcdef" }, "its fingerprint 0123456789abcdef0123456789abcdef is not the spec's"},
		{"wrong signature", func(s *rederive.Snapshot) {
			n, err := note.Sign(&note.Note{Text: s.Note[:strings.Index(s.Note, "\n\n")+1]}, other)
			if err != nil {
				t.Error(err)
			}
			s.Note = string(n)
		}, "its note is not signed by"},
	} {
		proxy := tamperProxy(t, url, func(r *http.Request, body []byte) []byte {
			if r.URL.Path != "/v1/derivations/balances/snapshot" {
				return nil
			}
			var s rederive.Snapshot
			if err := json.Unmarshal(body, &s); err != nil {
				t.Errorf("proxy: %v", err)
				return nil
			}
			tc.tamper(&s)
			b, _ := json.Marshal(s)
			return b
		})
		r := runVerifyTest(t, d.remoteArgs(proxy, spec, "--from-snapshot")...)
		if r.code != exitVerification || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("%s: %v\nwant exit %d with %q", tc.name, r, exitVerification, tc.want)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDaemonSplitBrain (issue 26, items 2 and 4) runs two daemon binaries
// that sign with one key (the key files copied), each on its own data
// directory, both configured with one peer list naming both (as one config
// file deployed to every instance would): the split-brain configuration
// serve refused before ("is this instance: same verifier key and
// origins"). Each tells itself apart by its data directory's identity
// (the Auditd-Instance header, which differs between the two and matches
// <data-dir>/instance-id) and skips itself. Fed different records under
// one log name, each finds the fork with the other, puts the log
// read-only (GET /v1/logs/pay says so, naming the fork; a POST gets 503
// read_only; no checkpoint is signed after) and raises both the check's
// alert integrity/checks/peers/pay/fork and the ledger's
// integrity/pay/fork (GET /v1/alerts).
func TestDaemonSplitBrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)

	shared := t.TempDir()
	key := filepath.Join(shared, "auditd.key")
	if err := writeNewKey(key, "auditd-split.example"); err != nil {
		t.Fatal(err)
	}
	type node struct {
		dir, key, addr, cfg string
		d                   *daemon
	}
	var nodes [2]*node
	for i := range nodes {
		dir := t.TempDir()
		n := &node{dir: filepath.Join(dir, "data"), key: filepath.Join(dir, "auditd.key"), addr: freeAddr(t),
			cfg: filepath.Join(dir, "auditd.yaml")}
		for _, ext := range []string{"", ".pub"} { // one key, copied
			b, err := os.ReadFile(key + ext)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(n.key+ext, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		nodes[i] = n
	}
	var list strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&list, "      - url: http://%s\n        key_file: %s.pub\n", n.addr, key)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n.d == nil {
				continue
			}
			n.d.kill()
			if t.Failed() {
				ls := n.d.stderr.lines()
				t.Logf("stderr tail of %s:\n%s", n.addr, strings.Join(ls[max(0, len(ls)-30):], "\n"))
			}
		}
	})
	for i, n := range nodes {
		cfg := fmt.Sprintf("key_file: %s\nchecks:\n  peers:\n    interval: 100ms\n    list:\n%s", n.key, list.String())
		if err := os.WriteFile(n.cfg, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		// Each its own state directory: two daemons with one key on one
		// machine must not share what they keep by key there.
		t.Setenv("XDG_STATE_HOME", filepath.Join(filepath.Dir(n.dir), "state"))
		d, err := startDaemonArgs(ctx, bin, i, "serve", "--data-dir", n.dir, "--listen", n.addr,
			"--checkpoint-interval", "20ms", "--log-format", "text", "--config", n.cfg)
		n.d = d
		if err != nil {
			t.Fatalf("serve %s: %v", n.addr, err)
		}
	}

	// Each names its instance: its data directory's identity, which
	// differs between the two.
	var ids [2]string
	for i, n := range nodes {
		resp, err := http.Get(n.d.url + "/v1/verifier")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		b, err := os.ReadFile(filepath.Join(n.dir, "instance-id"))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = resp.Header.Get("Auditd-Instance")
		if ids[i] == "" || ids[i] != strings.TrimSpace(string(b)) || resp.Header.Get("Auditd-Instance-Run") == "" {
			t.Fatalf("%s: Auditd-Instance %q, Auditd-Instance-Run %q, instance-id %q", n.addr, ids[i], resp.Header.Get("Auditd-Instance-Run"), b)
		}
	}
	if ids[0] == ids[1] {
		t.Fatalf("two data directories, one identity %q", ids[0])
	}

	records := func(fork bool) []byte {
		var b strings.Builder
		for i := range 300 {
			amount := i
			if fork && i == 150 {
				amount = -1
			}
			fmt.Fprintf(&b, `{"id":"o-%d","time":"2026-01-01T00:00:%02d.%03dZ","payload":{"amount":%d}}`+"\n", i, i/1000, i%1000, amount)
		}
		return []byte(b.String())
	}
	for i, n := range nodes {
		if code, body, err := n.d.postBody(ctx, "pay", "?wait=checkpoint", records(i == 1)); err != nil || code != http.StatusOK {
			t.Fatalf("%s: POST: %d %s %v", n.addr, code, body, err)
		}
	}

	for _, n := range nodes {
		var info struct {
			Size     uint64 `json:"size"`
			ReadOnly string `json:"read_only"`
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := n.d.getJSON(ctx, "/v1/logs/pay", &info); err != nil {
				t.Fatal(err)
			}
			if info.ReadOnly != "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(info.ReadOnly, "fork") || !strings.Contains(info.ReadOnly, "peer http://") {
			t.Fatalf("%s: GET /v1/logs/pay: read_only %q, want the fork with the peer", n.addr, info.ReadOnly)
		}
		cp, err := n.d.getText(ctx, "/v1/logs/pay/checkpoint")
		if err != nil {
			t.Fatal(err)
		}
		if code, body, err := n.d.postBody(ctx, "pay", "", []byte(`{"id":"after","payload":{}}`+"\n")); err != nil ||
			code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"read_only"`) {
			t.Fatalf("%s: POST after the fork: %d %s %v, want 503 read_only", n.addr, code, body, err)
		}

		var alerts struct {
			Alerts []struct {
				ID     string            `json:"id"`
				State  string            `json:"state"`
				Labels map[string]string `json:"labels"`
			} `json:"alerts"`
		}
		want := map[string]bool{"integrity/pay/fork": false, "integrity/checks/peers/pay/fork": false}
		deadline = time.Now().Add(10 * time.Second)
		for {
			if err := n.d.getJSON(ctx, "/v1/alerts?state=firing", &alerts); err != nil {
				t.Fatal(err)
			}
			for _, a := range alerts.Alerts {
				if _, ok := want[a.ID]; ok && a.State == "firing" && a.Labels["violation"] == "fork" {
					want[a.ID] = true
				}
			}
			if (want["integrity/pay/fork"] && want["integrity/checks/peers/pay/fork"]) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !want["integrity/pay/fork"] || !want["integrity/checks/peers/pay/fork"] {
			t.Fatalf("%s: firing alerts %+v, want both fork alerts", n.addr, alerts.Alerts)
		}

		// Itself: skipped on every pass, never compared; the other: a
		// fork on every pass.
		m := scrapeAll(ctx, &kafkaDaemon{daemon: n.d})
		self := fmt.Sprintf(`peer="http://%s"`, n.addr)
		if m.sum("auditd_peer_comparisons_total", self+`,result="self"`) == 0 ||
			m.sum("auditd_peer_comparisons_total", self+`,result="agree"`) != 0 ||
			m.sum("auditd_peer_comparisons_total", self+`,result="fork"`) != 0 {
			t.Fatalf("%s: comparisons with itself: self %v, agree %v, fork %v", n.addr,
				m.sum("auditd_peer_comparisons_total", self+`,result="self"`),
				m.sum("auditd_peer_comparisons_total", self+`,result="agree"`),
				m.sum("auditd_peer_comparisons_total", self+`,result="fork"`))
		}

		// Nothing signed after: the checkpoint stays as it was.
		time.Sleep(200 * time.Millisecond)
		if again, err := n.d.getText(ctx, "/v1/logs/pay/checkpoint"); err != nil || again != cp {
			t.Fatalf("%s: checkpoint after the fork changed:\n%s\nthen\n%s (%v)", n.addr, cp, again, err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServe runs the daemon in-process on a loopback port with a fresh
// data dir and returns its URL and the verifier key file it generated.
func startServe(t *testing.T) (string, string) {
	t.Helper()
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = t.TempDir(), "127.0.0.1:0"
	cfg.CheckpointInterval = 10 * time.Millisecond
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	return "http://" + addr, cfg.KeyFile + ".pub"
}

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s %s", url, resp.Status, b)
	}
}

func TestProveExitCodes(t *testing.T) {
	srv, vkeyFile := startServe(t)
	post(t, srv+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","key":"acct-1","payload":{"amount":5}}
{"id":"o-2","payload_base64":"AAEC"}`)
	saved := filepath.Join(t.TempDir(), "cp")
	prove := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runProve(append([]string{"-server", srv}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := prove("-log", "orders", "-id", "o-1", "-verifier-key-file", vkeyFile, "-save-checkpoint", saved); code != 0 || !strings.Contains(out, "VERIFIED") {
		t.Fatalf("prove by id: exit %d\n%s", code, out)
	}
	post(t, srv+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-3","payload":[1]}`)
	if code, out := prove("-log", "orders", "-index", "2", "-verifier-key-file", vkeyFile, "-previous-checkpoint", saved); code != 0 || !strings.Contains(out, "consistency size 2 -> 3  OK") {
		t.Fatalf("prove with a previous checkpoint: exit %d\n%s", code, out)
	}

	// A key the server does not sign with: a failed check, exit 1.
	otherKey := filepath.Join(t.TempDir(), "other.key")
	if err := runKeygen([]string{"-name", "auditd.local", "-out", otherKey}); err != nil {
		t.Fatal(err)
	}
	if code, out := prove("-log", "orders", "-id", "o-1", "-verifier-key-file", otherKey+".pub"); code != 1 || !strings.Contains(out, "FAILED") {
		t.Fatalf("prove with the wrong key: exit %d, want 1\n%s", code, out)
	}
	// A saved checkpoint whose origin was changed: its signature fails, exit 1.
	bad := filepath.Join(t.TempDir(), "bad")
	b, _ := os.ReadFile(saved)
	os.WriteFile(bad, bytes.Replace(b, []byte("/orders\n"), []byte("/other\n"), 1), 0o644)
	if code, out := prove("-log", "orders", "-index", "0", "-verifier-key-file", vkeyFile, "-previous-checkpoint", bad); code != 1 {
		t.Fatalf("prove with a tampered previous checkpoint: exit %d, want 1\n%s", code, out)
	}
	// Usage and lookup errors: exit 2.
	for _, args := range [][]string{
		{"-log", "orders", "-verifier-key-file", vkeyFile},                              // neither id nor index
		{"-log", "orders", "-id", "o-1"},                                                // no key
		{"-log", "orders", "-id", "nope", "-verifier-key-file", vkeyFile},               // unknown id
		{"-log", "nolog", "-id", "o-1", "-verifier-key-file", vkeyFile},                 // unknown log
		{"-log", "orders", "-index", "99", "-verifier-key-file", vkeyFile},              // beyond the tree
		{"-log", "orders", "-id", "o-1", "-verifier-key", "not-a-key"},                  // malformed key
		{"-log", "orders", "-id", "o-1", "-verifier-key-file", vkeyFile, "-bogus-flag"}, // bad flag
	} {
		if code, out := prove(args...); code != 2 {
			t.Errorf("prove %v: exit %d, want 2\n%s", args, code, out)
		}
	}
}

func TestKeygen(t *testing.T) {
	out := filepath.Join(t.TempDir(), "k")
	if err := runKeygen([]string{"-name", "audit.example", "-out", out}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	k, created, err := loadOrCreateKey(out, "") // an origin other than the key's is refused: TestDefaultOriginUnique
	if err != nil || created {
		t.Fatalf("loading the key: created %v, %v", created, err)
	}
	pub, _ := os.ReadFile(out + ".pub")
	if strings.TrimSpace(string(pub)) != k.vkey || !strings.HasPrefix(k.vkey, "audit.example+") {
		t.Errorf("verifier key %q, .pub holds %q", k.vkey, pub)
	}
	if err := runKeygen([]string{"-out", out}); err == nil {
		t.Error("keygen overwrote an existing key")
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("listen: 127.0.0.1:9999\ncheckpoint_interval: 250ms\nlogs: [a, b]\ncreate_logs: false\n"), 0o644)
	c, err := loadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9999" || c.CheckpointInterval != 250*time.Millisecond || len(c.Logs) != 2 || *c.CreateLogs || c.DataDir != "./auditd-data" {
		t.Errorf("config = %+v", c)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("listne: 127.0.0.1:9999\n"), 0o644)
	if _, err := loadConfig(bad); err == nil || !strings.Contains(err.Error(), "listne") {
		t.Errorf("unknown field: %v, want an error naming it", err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, nil, 0o644)
	if _, err := loadConfig(empty); err != nil {
		t.Errorf("empty file: %v", err)
	}
	if got := configPath([]string{"--listen", "x", "--config=f.yaml"}); got != "f.yaml" {
		t.Errorf("configPath = %q", got)
	}
	t.Setenv("AUDITD_WRITE_TOKEN", "s3cret")
	if c, _ := loadConfig(""); c.WriteToken != "s3cret" {
		t.Errorf("AUDITD_WRITE_TOKEN not applied: %q", c.WriteToken)
	}
}

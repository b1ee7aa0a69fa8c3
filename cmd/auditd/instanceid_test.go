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

	"github.com/auditd/auditd/ledger"
)

// TestInstanceIdentity: the first serve on a data directory makes its
// identity (<data-dir>/instance-id, mode 0600) and names every API answer
// with it (Auditd-Instance) and with a run of its own
// (Auditd-Instance-Run); a restart keeps the identity and changes the run;
// another data directory gets another identity. A read-only command (fsck)
// on a data directory makes none.
func TestInstanceIdentity(t *testing.T) {
	serveOnce := func(dir string) (id, run string) {
		t.Helper()
		cfg := defaultConfig()
		cfg.DataDir, cfg.KeyFile, cfg.Listen = dir, filepath.Join(dir, "auditd.key"), freeAddr(t)
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ready, done := make(chan string, 1), make(chan error, 1)
		go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("serve: %v", err)
		}
		resp, err := http.Get("http://" + cfg.Listen + "/v1/logs")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve returned %v", err)
		}
		return resp.Header.Get("Auditd-Instance"), resp.Header.Get("Auditd-Instance-Run")
	}
	dir := filepath.Join(t.TempDir(), "data")
	id, run := serveOnce(dir)
	b, err := os.ReadFile(filepath.Join(dir, instanceIDFile))
	if err != nil {
		t.Fatal(err)
	}
	if id == "" || run == "" || id != strings.TrimSpace(string(b)) || len(id) != 32 {
		t.Fatalf("Auditd-Instance %q, Auditd-Instance-Run %q, %s holds %q", id, run, instanceIDFile, b)
	}
	if fi, err := os.Stat(filepath.Join(dir, instanceIDFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", instanceIDFile, fi.Mode(), err)
	}
	id2, run2 := serveOnce(dir)
	if id2 != id || run2 == run || run2 == "" {
		t.Fatalf("restart: instance %q run %q, want instance %q and a new run (was %q)", id2, run2, id, run)
	}
	if other, _ := serveOnce(filepath.Join(t.TempDir(), "data")); other == id || other == "" {
		t.Fatalf("another data directory: instance %q (the first: %q)", other, id)
	}

	// fsck reads a data directory and makes no identity in it.
	ro := filepath.Join(t.TempDir(), "data")
	k, _, err := loadOrCreateKey(filepath.Join(ro, "auditd.key"), "identity.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(ro, k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.CreateLog("pay")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Append(wctx, []ledger.Entry{{ID: "e1", Payload: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(wctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := runFsck([]string{"--data-dir", ro, "--quiet"}, io.Discard, &stderr); code != fsckClean {
		t.Fatalf("fsck: exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ro, instanceIDFile)); !os.IsNotExist(err) {
		t.Fatalf("fsck made %s: %v", instanceIDFile, err)
	}
}

// TestInstanceIdentityFile: an identity file that holds no identity (empty,
// spaces, too long) refuses the start, naming the file; one an operator
// wrote by hand within the rules is used as it is.
func TestInstanceIdentityFile(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name, content string
		ok            bool
	}{
		{"empty", "", false},
		{"spaces", "two words\n", false},
		{"header injection", "a\r\nX-Evil: 1", false},
		{"too long", strings.Repeat("a", 65), false},
		{"by hand", "auditd-a.eu-west_1\n", true},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, instanceIDFile)
		if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		in, err := openInstance(dir, logger)
		if tc.ok {
			if err != nil || in.ID != strings.TrimSpace(tc.content) || in.Run == "" {
				t.Errorf("%s: %+v %v", tc.name, in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err %v, want one naming %s", tc.name, err, path)
		}
		if b, _ := os.ReadFile(path); string(b) != tc.content {
			t.Errorf("%s: the file was rewritten: %q", tc.name, b)
		}
	}
}

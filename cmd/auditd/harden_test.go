package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tryServe runs serve with cfg (validated) until it is ready or fails. On
// success the daemon stops at the end of the test; the error is serve's if
// it returned before it was ready.
func tryServe(t *testing.T, cfg Config, logs io.Writer) (string, error) {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	if err := cfg.validate(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), ready) }()
	select {
	case addr := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve returned %v", err)
			}
		})
		return "http://" + addr, nil
	case err := <-done:
		cancel()
		return "", err
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve neither started nor failed in 30s")
		return "", nil
	}
}

func testConfig(t *testing.T) Config {
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = filepath.Join(t.TempDir(), "data"), "127.0.0.1:0"
	cfg.CheckpointInterval = 10 * time.Millisecond
	return cfg
}

// Item 9: a signing key that others can read is refused (0644, and 0666
// in a 0777 data dir); --allow-insecure-key-file starts with a loud error.
func TestServeRefusesReadableKey(t *testing.T) {
	for _, tc := range []struct {
		name           string
		keyMode, dirMo fs.FileMode
	}{{"0644", 0o644, 0o700}, {"0666 in 0777", 0o666, 0o777}, {"0640", 0o640, 0o700}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			key := filepath.Join(cfg.DataDir, "auditd.key")
			if err := writeNewKey(key, "harden.test"); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(key, tc.keyMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(cfg.DataDir, tc.dirMo); err != nil {
				t.Fatal(err)
			}
			_, err := tryServe(t, cfg, nil)
			if err == nil || !strings.Contains(err.Error(), "chmod 600") {
				t.Fatalf("serve with a key of mode %04o: %v, want a refusal naming chmod 600", tc.keyMode, err)
			}
			cfg.AllowInsecureKeyFile = true
			var logs syncBuffer
			if _, err := tryServe(t, cfg, &logs); err != nil {
				t.Fatalf("serve --allow-insecure-key-file: %v", err)
			}
			if !strings.Contains(logs.String(), `level=ERROR msg="INSECURE`) {
				t.Errorf("no loud error in the log:\n%s", logs.String())
			}
		})
	}
}

// Item 9: the data dir is created 0700, an existing 0777 one is narrowed
// to 0700, and no file the daemon creates in it is readable by others
// even when the process umask is 0 (Pebble creates its files 0666).
func TestServeDataDirPrivate(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.DataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.DataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	old := umask(0)
	defer umask(old)
	cfg.Logs = []string{"a"}
	if _, err := tryServe(t, cfg, nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %04o, want 0700", fi.Mode().Perm())
	}
	n := 0
	filepath.WalkDir(cfg.DataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		n++
		switch {
		case p == cfg.DataDir:
		case strings.HasSuffix(p, ".pub"):
			// A public key is 0644 wherever auditd writes one (issue 31);
			// the 0700 data dir keeps others out anyway. Nobody else may
			// change it.
			if info.Mode().Perm()&0o022 != 0 {
				t.Errorf("%s has mode %04o: writable by others", p, info.Mode().Perm())
			}
		case info.Mode().Perm()&0o077 != 0:
			t.Errorf("%s has mode %04o: readable by others", p, info.Mode().Perm())
		}
		return nil
	})
	if n < 5 {
		t.Fatalf("only %d files in the data dir", n)
	}
}

// Item 12: tokens can come from files (not shown by ps), and --help says
// that token flags are visible.
func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	wf, rf := filepath.Join(dir, "w"), filepath.Join(dir, "r")
	os.WriteFile(wf, []byte("wr1te\n"), 0o600)
	os.WriteFile(rf, []byte("  r3ad \n"), 0o600)
	cfg := testConfig(t)
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	bindFlags(fset, &cfg)
	if err := fset.Parse([]string{"--write-token-file", wf, "--read-token-file", rf}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.WriteToken != "wr1te" || cfg.ReadToken != "r3ad" {
		t.Errorf("tokens %q, %q", cfg.WriteToken, cfg.ReadToken)
	}
	srv, err := tryServe(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv+"/v1/logs/l/entries", "application/x-ndjson", strings.NewReader(`{"payload":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without the token from the file: %s", resp.Status)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), emptyFile(t)} {
		c := testConfig(t)
		c.WriteTokenFile = bad
		if err := c.validate(); err == nil {
			t.Errorf("token file %s accepted", bad)
		}
	}
	var help bytes.Buffer
	fset.SetOutput(&help)
	fset.PrintDefaults()
	if !strings.Contains(help.String(), "visible in ps") {
		t.Errorf("--help does not warn that token flags are visible:\n%s", help.String())
	}
}

func emptyFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(p, []byte("\n"), 0o600)
	return p
}

// Items 13, 14: a key name the signer refuses is refused before any file is
// written, so a retry with a good name (or a later good start) works.
func TestBadKeyNameWritesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "k.key")
	if err := runKeygen([]string{"-name", "bad name", "-out", out}); err == nil {
		t.Fatal("keygen accepted the name 'bad name'")
	}
	for _, p := range []string{out, out + ".pub"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("keygen with a bad name left %s behind", p)
		}
	}
	if err := runKeygen([]string{"-name", "good.name", "-out", out}); err != nil {
		t.Fatalf("retry with a good name: %v", err)
	}

	cfg := testConfig(t)
	cfg.Origin = "bad name"
	if _, err := tryServe(t, cfg, nil); err == nil {
		t.Fatal("serve --origin 'bad name' started")
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "auditd.key")); err == nil {
		t.Error("serve --origin 'bad name' wrote a key")
	}
	cfg.Origin = "good.origin"
	cfg.KeyFile = ""
	if _, err := tryServe(t, cfg, nil); err != nil {
		t.Fatalf("serve with a good origin after a bad one: %v", err)
	}
}

// Item 15: a port in use fails serve before it makes the data dir or a
// key; extra arguments are refused.
func TestServeBindsFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.Listen = ln.Addr().String()
	if _, err := tryServe(t, cfg, nil); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("serve on a taken port: %v", err)
	}
	if _, err := os.Stat(cfg.DataDir); err == nil {
		t.Errorf("serve on a taken port left %s behind", cfg.DataDir)
	}
	err = runServe([]string{"--data-dir", cfg.DataDir, "extra"})
	if err == nil || exitStatus(err) != 2 {
		t.Errorf("serve with an extra argument: %v (exit %d), want a usage error", err, exitStatus(err))
	}
	if _, err := os.Stat(cfg.DataDir); err == nil {
		t.Errorf("serve with an extra argument left %s behind", cfg.DataDir)
	}
}

// Item 19: a usage error exits 2 for every command; other errors keep 1.
func TestUsageErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	for name, err := range map[string]error{
		"serve bad flag":   runServe([]string{"--no-such-flag"}),
		"serve extra arg":  runServe([]string{"x"}),
		"demo bad flag":    runDemo([]string{"--no-such-flag"}),
		"demo extra arg":   runDemo([]string{"x"}),
		"keygen bad flag":  runKeygen([]string{"--no-such-flag"}),
		"keygen extra arg": runKeygen([]string{"-out", filepath.Join(dir, "k"), "x"}),
	} {
		if err == nil || exitStatus(err) != 2 {
			t.Errorf("%s: %v, exit %d; want 2", name, err, exitStatus(err))
		}
	}
	if st := exitStatus(errors.New("runtime")); st != 1 {
		t.Errorf("a runtime error exits %d, want 1", st)
	}
}

// Item 18: a data dir another process holds is named with its lock and the
// likely cause, not only "resource temporarily unavailable".
func TestServeLockedDataDir(t *testing.T) {
	cfg := testConfig(t)
	if _, err := tryServe(t, cfg, nil); err != nil {
		t.Fatal(err)
	}
	second := cfg
	second.Listen = "127.0.0.1:0"
	_, err := tryServe(t, second, nil)
	if err == nil || !strings.Contains(err.Error(), "LOCK is held by another process") || !strings.Contains(err.Error(), "another auditd serve") {
		t.Fatalf("second serve on one data dir: %v", err)
	}
	// Held by another process (this test binary, re-run as a helper that
	// takes the same fcntl lock Pebble takes): EAGAIN, explained.
	other := testConfig(t)
	os.MkdirAll(other.DataDir, 0o700)
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	helper.Env = append(os.Environ(), "AUDITD_HOLD_LOCK="+filepath.Join(other.DataDir, "LOCK"))
	stdout, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { helper.Process.Kill(); helper.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "locked") {
		t.Fatalf("helper: %q", line)
	}
	_, err = tryServe(t, other, nil)
	if err == nil || !strings.Contains(err.Error(), "LOCK is held by another process") || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("serve on a data dir another process holds: %v", err)
	}
}

// TestHelperHoldLock is the helper process of TestServeLockedDataDir.
func TestHelperHoldLock(t *testing.T) {
	p := os.Getenv("AUDITD_HOLD_LOCK")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
}

// Item 3: auditd verify --config on a spec whose merge key reaches itself
// is a configuration error (exit 2), not a stack overflow.
func TestVerifyAliasCycle(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cycle.yaml")
	os.WriteFile(p, []byte("derivations:\n  - &b\n    <<: *b\n    name: b\n"), 0o600)
	var out, errb bytes.Buffer
	code := runVerify([]string{"--config", p, "--data-dir", t.TempDir()}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String()+out.String(), "alias cycle") {
		t.Errorf("verify on a merge cycle: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// Item 7: /metrics keeps per-log series for at most max_metric_logs logs;
// the others' counters and gauges are summed into log="_other".
func TestMetricsBoundLogLabels(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxMetricLogs = 3
	srv, err := tryServe(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		post(t, fmt.Sprintf("%s/v1/logs/m%d/entries", srv, i), fmt.Sprintf(`{"id":"a","payload":1}`+"\n"+`{"id":"b%d","payload":2}`, i))
	}
	resp, err := http.Get(srv + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, want := range []string{`auditd_ledger_appended_entries_total{log="m0"} 2`, `auditd_ledger_appended_entries_total{log="m2"} 2`,
		`auditd_ledger_appended_entries_total{log="_other"} 6`, `auditd_ledger_log_size_entries{log="_other"} 6`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `log="m3"`) || strings.Contains(body, `log="m5"`) {
		t.Error("/metrics has series of logs past the bound")
	}
}

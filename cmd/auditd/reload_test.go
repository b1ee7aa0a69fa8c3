package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeConfigErrorExits2: serve refuses a configuration it cannot run
// with (an unknown key, a bad value, a TLS file that is not there) with
// exit status 2, and a run-time failure keeps 1.
func TestServeConfigErrorExits2(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := filepath.Join(dir, "data")
	for name, args := range map[string][]string{
		"unknown key":     {"--config", write("unknown.yaml", "listn: 127.0.0.1:0\n")},
		"bare duration":   {"--config", write("bare.yaml", "checkpoint_interval: 5\n")},
		"bad value":       {"--config", write("neg.yaml", "max_batch: 0\n")},
		"log level":       {"--data-dir", data, "--log-level", "loud"},
		"missing tls":     {"--data-dir", data, "--listen", "127.0.0.1:0", "--tls-cert-file", filepath.Join(dir, "no.crt"), "--tls-key-file", filepath.Join(dir, "no.key")},
		"missing derived": {"--data-dir", data, "--listen", "127.0.0.1:0", "--derivations", filepath.Join(dir, "none.yaml")},
	} {
		err := runServe(args)
		if err == nil {
			t.Errorf("%s: serve ran", name)
			continue
		}
		if st := exitStatus(err); st != 2 {
			t.Errorf("%s: %v: exit %d, want 2", name, err, st)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused configuration left a data dir behind: %v", err)
	}
	if strings.Contains(configError{os.ErrNotExist}.Error(), "configError") {
		t.Error("a configuration error's text names a Go type")
	}
}

// TestReloadSIGHUPAndEndpoint runs the binary with a config file and
// changes it while it serves: a new write token applies on SIGHUP (the old
// one gets 401, the new one 200); a broken file, and a change of a key that
// cannot change live (listen), are refused whole on SIGHUP and on POST
// /-/reload (400 naming the file and line, or the key), the running
// configuration kept, and auditd_config_last_reload_successful says so;
// POST /-/reload without the write token is 401.
func TestReloadSIGHUPAndEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // the binary's build included
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "auditd.yaml")
	writeCfg := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := "data_dir: " + filepath.Join(dir, "data") + "\nlisten: 127.0.0.1:0\ncheckpoint_interval: 20ms\ncheckpoint_guard_dir: off\n"
	writeCfg(base + "write_token: first\n")
	d, err := startDaemonArgs(ctx, bin, 1, "serve", "--config", cfgPath, "--log-format", "text")
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()
	event := []byte(`{"id":"e1","payload":{"n":1}}` + "\n")
	post := func(token string) int {
		t.Helper()
		code, _, err := tokenPost(ctx, d, token, "orders", event)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	reload := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/-/reload", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	metric := func() string {
		t.Helper()
		text, err := d.getText(ctx, "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(l, "auditd_config_last_reload_successful "); ok {
				return v
			}
		}
		t.Fatal("no auditd_config_last_reload_successful in /metrics")
		return ""
	}
	// hup sends SIGHUP and waits for the reload's log line (the n-th).
	hups := 0
	hup := func(want string) {
		t.Helper()
		hups++
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for {
			n := 0
			for _, l := range d.stderr.lines() {
				if strings.Contains(l, "trigger=SIGHUP") {
					n++
					if n == hups && !strings.Contains(l, want) {
						t.Fatalf("SIGHUP %d logged %q, want %q", hups, l, want)
					}
				}
			}
			if n >= hups {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no reload logged after SIGHUP %d", hups)
			case <-d.exited:
				t.Fatalf("SIGHUP ended serve: %v", d.err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	if code, body := reload(""); code != http.StatusUnauthorized {
		t.Errorf("POST /-/reload without the token: %d %s, want 401", code, body)
	}
	if code := post("first"); code != http.StatusOK {
		t.Fatalf("POST with the first token: %d", code)
	}

	// A new token, on SIGHUP.
	writeCfg(base + "write_token: second\n")
	hup("configuration reloaded")
	if code := post("first"); code != http.StatusUnauthorized {
		t.Errorf("POST with the old token after the reload: %d, want 401", code)
	}
	if code := post("second"); code != http.StatusOK {
		t.Errorf("POST with the new token after the reload: %d, want 200", code)
	}
	if v := metric(); v != "1" {
		t.Errorf("auditd_config_last_reload_successful after a reload = %s, want 1", v)
	}

	// A broken file: refused whole, the running configuration kept.
	writeCfg(base + "write_token: third\nlistn: 127.0.0.1:9\n")
	hup("configuration reload refused")
	if code := post("second"); code != http.StatusOK {
		t.Errorf("POST with the running token after a refused reload: %d, want 200", code)
	}
	if code := post("third"); code != http.StatusUnauthorized {
		t.Errorf("POST with the broken file's token: %d, want 401", code)
	}
	if v := metric(); v != "0" {
		t.Errorf("auditd_config_last_reload_successful after a refused reload = %s, want 0", v)
	}
	code, body := reload("second")
	if code != http.StatusBadRequest || !strings.Contains(body, "auditd.yaml:6") || !strings.Contains(body, "listn") {
		t.Errorf("POST /-/reload of a broken file: %d %s, want 400 naming auditd.yaml:6 and the key", code, body)
	}

	// A key that cannot change live: refused, naming it.
	writeCfg(strings.Replace(base, "127.0.0.1:0", "127.0.0.1:1", 1) + "write_token: third\n")
	code, body = reload("second")
	if code != http.StatusBadRequest || !strings.Contains(body, "listen changed") || !strings.Contains(body, "restart") {
		t.Errorf("POST /-/reload changing listen: %d %s, want 400 naming listen", code, body)
	}
	if code := post("third"); code != http.StatusUnauthorized {
		t.Errorf("a refused reload applied its token: %d", code)
	}

	// Fixed: applied.
	writeCfg(base + "write_token: third\n")
	if code, body := reload("second"); code != http.StatusOK || !strings.Contains(body, "reloaded") {
		t.Errorf("POST /-/reload of a good file: %d %s", code, body)
	}
	if code := post("third"); code != http.StatusOK {
		t.Errorf("POST with the token of the reloaded file: %d", code)
	}
	if v := metric(); v != "1" {
		t.Errorf("auditd_config_last_reload_successful = %s, want 1", v)
	}
	if err := d.stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

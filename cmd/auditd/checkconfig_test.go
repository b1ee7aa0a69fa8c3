package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/auditd/auditd/internal/testca"
)

// checkConfigDir writes files (name: content) into a temp dir and returns
// it; "auditd.yaml" is the config. Paths in the contents may use DIR.
func checkConfigDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.ReplaceAll(content, "DIR", dir)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCheckConfigT(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runCheckConfig(args, &out, &errb)
	return code, out.String(), errb.String()
}

const checkConfigSpec = `derivations:
  - name: balances
    sources: ["payments.*"]
    key: event.account
    initial: "0"
    step: state + event.amount
    store:
      postgres:
        dsn: postgres://postgres@127.0.0.1:5432/test?sslmode=disable
        table: balances
`

// Issue 31: check-config validates what serve would load and exits 0 with
// one line when it is valid, touching nothing: no data dir, no key.
func TestCheckConfigValid(t *testing.T) {
	dir := checkConfigDir(t, map[string]string{
		"auditd.yaml":   "data_dir: DIR/data\ncheckpoint_interval: 5s\nderivations: [DIR/balances.yaml]\n",
		"balances.yaml": checkConfigSpec,
	})
	code, out, errs := runCheckConfigT(t, "--config", filepath.Join(dir, "auditd.yaml"))
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errs)
	}
	if !strings.Contains(out, "is valid: ") || !strings.Contains(out, "1 derivation,") || strings.Count(out, "\n") != 1 {
		t.Errorf("stdout %q, want one line saying it is valid with 1 derivation", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("check-config created the data dir (%v)", err)
	}
}

// A CEL error in a derivation spec (given by --derivations) exits 2 with
// the spec's file:line:col.
func TestCheckConfigBadCEL(t *testing.T) {
	dir := checkConfigDir(t, map[string]string{
		"auditd.yaml": "data_dir: DIR/data\n",
		"bad.yaml":    strings.Replace(checkConfigSpec, "step: state + event.amount", "step: state +* event.amount", 1),
	})
	code, _, errs := runCheckConfigT(t, "--config", filepath.Join(dir, "auditd.yaml"), "--derivations", filepath.Join(dir, "bad.yaml"))
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errs)
	}
	if !regexp.MustCompile(regexp.QuoteMeta(filepath.Join(dir, "bad.yaml")) + `:6:\d+: derivation "balances": step: `).MatchString(errs) {
		t.Errorf("stderr lacks bad.yaml:6:COL naming the step:\n%s", errs)
	}
}

// A number where a duration is wanted says to write one, with the field
// and its place, from check-config and from serve (which reads the file
// with the same loader).
func TestCheckConfigBareDuration(t *testing.T) {
	dir := checkConfigDir(t, map[string]string{"auditd.yaml": "data_dir: DIR/data\ncheckpoint_interval: 5\n"})
	path := filepath.Join(dir, "auditd.yaml")
	want := path + ":2:22: checkpoint_interval: 5 is a number, not a duration: use a duration such as 5s"
	code, _, errs := runCheckConfigT(t, "--config", path)
	if code != 2 || !strings.Contains(errs, want) {
		t.Errorf("check-config: exit %d, stderr:\n%s\nwant exit 2 and %q", code, errs, want)
	}
	if err := runServe([]string{"--config", path}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve: %v, want %q", err, want)
	}
}

// A signing key others can read is reported, with the chmod that fixes it.
func TestCheckConfigReadableSigningKey(t *testing.T) {
	dir := checkConfigDir(t, map[string]string{"auditd.yaml": "data_dir: DIR/data\nkey_file: DIR/auditd.key\n"})
	key := filepath.Join(dir, "auditd.key")
	if err := writeNewKey(key, "check-config-test"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCheckConfigT(t, "--config", filepath.Join(dir, "auditd.yaml"))
	if code != 2 || !strings.Contains(errs, key) || !strings.Contains(errs, "chmod 600") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 naming %s and chmod 600", code, errs, key)
	}
	// allow_insecure_key_file: serve would start, so the file is valid, with a warning.
	allow := filepath.Join(dir, "allow.yaml")
	if err := os.WriteFile(allow, []byte("data_dir: "+dir+"/data\nkey_file: "+key+"\nallow_insecure_key_file: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCheckConfigT(t, "--config", allow)
	if code != 0 || !strings.Contains(errs, "warning: signing key file "+key+" has mode 0644") {
		t.Errorf("allowed: exit %d, stderr:\n%s\nwant exit 0 and a warning", code, errs)
	}
}

// A TLS key file that does not exist is reported.
func TestCheckConfigMissingTLSKey(t *testing.T) {
	dir := t.TempDir()
	cert, _ := testca.New(t, "test CA").Server(t).Write(t, dir, "srv")
	missing := filepath.Join(dir, "missing.key")
	cfgFile := filepath.Join(dir, "auditd.yaml")
	if err := os.WriteFile(cfgFile, []byte("data_dir: "+dir+"/data\ntls_cert_file: "+cert+"\ntls_key_file: "+missing+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCheckConfigT(t, "--config", cfgFile)
	if code != 2 || !strings.Contains(errs, missing) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 naming %s", code, errs, missing)
	}
}

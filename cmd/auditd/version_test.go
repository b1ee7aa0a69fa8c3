package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestVersion: `auditd version`, `auditd --version` and `version --json`
// print the build information of the binary (its Go version at least; the
// module version is "devel" for a build from a clone).
func TestVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("auditd %s: %v\n%s", args[0], err, out)
		}
		if s := string(out); !strings.HasPrefix(s, "auditd ") || !strings.Contains(s, "with "+runtime.Version()) || !strings.Contains(s, "revision ") {
			t.Errorf("auditd %s printed %q", args[0], s)
		}
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Path, Version, Revision string
		GoVersion               string `json:"go_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Path != "github.com/auditd/auditd" || v.GoVersion != runtime.Version() || v.Version == "" {
		t.Errorf("version --json: %s (%v)", out, err)
	}
	var stderr bytes.Buffer
	if code := runVersion([]string{"extra"}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "unexpected argument") {
		t.Errorf("version extra: exit %d, %q", code, stderr.String())
	}
}

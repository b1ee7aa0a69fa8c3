package main

import (
	"context"
	"strings"
	"testing"

	"github.com/auditd/auditd/internal/buildinfo"
)

// Issue 31: serve's first log line names the build (version and VCS
// revision), so a log read after the fact says what was running. Before,
// the first line was about the signing key or the data dir.
func TestServeFirstLogLineNamesTheBuild(t *testing.T) {
	cfg := testConfig(t)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := startServeLogs(t, ctx, cfg, &logs)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	in := buildinfo.Read()
	for _, want := range []string{`msg="auditd starting"`, "version=" + in.Version, "revision=" + in.Revision} {
		if !strings.Contains(first, want) {
			t.Errorf("first log line %q lacks %q", first, want)
		}
	}
}

package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckpointGuardDir: the default guard dir follows the XDG base
// directory spec ($XDG_STATE_HOME when absolute, else ~/.local/state),
// "off" and "none" turn the guard off, anything else is taken as given;
// a guard inside the data dir is warned about.
func TestCheckpointGuardDir(t *testing.T) {
	t.Setenv("HOME", "/home/op")
	for _, tc := range []struct{ value, xdg, want string }{
		{"", "/state", "/state/auditd/guard"},
		{"", "", "/home/op/.local/state/auditd/guard"},
		{"", "relative/state", "/home/op/.local/state/auditd/guard"}, // the spec: relative paths are ignored
		{"off", "/state", ""},
		{"OFF", "/state", ""},
		{"none", "/state", ""},
		{"/srv/guard", "/state", "/srv/guard"},
	} {
		t.Setenv("XDG_STATE_HOME", tc.xdg)
		got, err := checkpointGuardDir(tc.value)
		if err != nil || got != tc.want {
			t.Errorf("checkpointGuardDir(%q) with XDG_STATE_HOME=%q = %q, %v; want %q", tc.value, tc.xdg, got, err, tc.want)
		}
	}

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	data := t.TempDir()
	for _, tc := range []struct {
		guard, warn string
	}{
		{filepath.Join(data, "guard"), "inside the data dir"},
		{data, "inside the data dir"},
		{data + "-guard", ""},
		{filepath.Join(filepath.Dir(data), "elsewhere"), ""},
		{"off", "checkpoint guard off"},
	} {
		logs.Reset()
		c := Config{DataDir: data, CheckpointGuardDir: tc.guard}
		if _, err := c.checkpointGuard(logger); err != nil {
			t.Fatal(err)
		}
		if got := logs.String(); (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
			t.Errorf("guard %s beside data dir %s: logged %q, want %q", tc.guard, data, got, tc.warn)
		}
	}
}

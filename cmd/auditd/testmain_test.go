package main

import (
	"fmt"
	"os"
	"testing"
)

// testTempDir is the test process's own directory (see TestMain).
var testTempDir string

// TestMain gives this package's tests a state directory of their own: the
// daemons they run (serve in-process, and the binary, which inherits the
// environment) keep their checkpoint guard copies under
// $XDG_STATE_HOME/auditd/guard by default, and must neither write into the
// home directory of whoever runs the tests nor see guard copies another
// run left there. Each daemon's key is its own, so the daemons of one run
// keep apart under it; a test that runs daemons on copies of one data
// directory (one key) gives each its own --checkpoint-guard-dir.
//
// The same directory holds the auditd binary buildDaemon builds once.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "auditd-test-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "state dir:", err)
		os.Exit(2)
	}
	os.Setenv("XDG_STATE_HOME", dir)
	testTempDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

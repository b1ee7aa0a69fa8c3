//go:build linux && (amd64 || arm64)

package netns

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNetwork makes a hub and two hosts: a host reaches the hub and the
// other host, has no route anywhere else, and reaches nothing once its
// link is down; a namespace left by a process that is gone is deleted
// (with its processes) by the next New, and Close deletes the network's
// own.
func TestNetwork(t *testing.T) {
	if why := Usable(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("network namespaces unusable in CI: %s", why)
		}
		t.Skipf("skipped: %s; run as root with iproute2 (ip)", why)
	}
	// A stale namespace: named for a process that has exited, with a
	// process in it.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := &NS{Name: "auditd-nstest-" + strconv.Itoa(dead.Process.Pid) + "-1-hub"}
	if err := ip("netns", "add", stale.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if exists(stale.Name) {
			_ = ip("netns", "del", stale.Name)
		}
	})
	sleeper := stale.Cmd("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	// Start returns once ip(8) is running, not once it has entered the
	// namespace: wait until the namespace lists it, or New's cleanup can
	// look before it is there.
	for deadline := time.Now().Add(10 * time.Second); !inNamespace(stale.Name, sleeper.Process.Pid); {
		if time.Now().After(deadline) {
			t.Fatalf("process %d never entered %s", sleeper.Process.Pid, stale.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}

	n, err := New("auditd-nstest", "x", "y")
	t.Cleanup(func() { _ = n.Close() })
	if err != nil {
		t.Fatal(err)
	}
	if exists(stale.Name) {
		t.Errorf("stale namespace %s not deleted", stale.Name)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the process in the stale namespace still runs")
	}

	x, y := n.Hosts[0], n.Hosts[1]
	l, err := y.Listen("tcp", y.Addr+":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "hello")
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, from := range []*NS{x, n.Hub} {
		c, err := from.Dial(ctx, "tcp", y.Addr+":7000")
		if err != nil {
			t.Fatalf("from %s: %v", from.Name, err)
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "hello" {
			t.Errorf("from %s: read %q", from.Name, b)
		}
	}
	// Only the subnet is routed.
	out, err := x.Cmd("ip", "-4", "route", "show", "table", "all").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(line, Subnet+".") && !strings.Contains(line, "127.") {
			t.Errorf("route beyond the subnet in %s: %s", x.Name, line)
		}
	}
	if _, err := x.Dial(ctx, "tcp", "192.0.2.1:80"); err == nil {
		t.Errorf("dialled outside the subnet from %s", x.Name)
	}
	// Link down: the other host is out of reach.
	if err := n.SetLink(x, false); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	defer dcancel()
	if c, err := x.Dial(dctx, "tcp", y.Addr+":7000"); err == nil {
		c.Close()
		t.Errorf("dialled %s with the link down", y.Addr)
	}
	if err := n.SetLink(x, true); err != nil {
		t.Fatal(err)
	}
	names := []string{n.Hub.Name, x.Name, y.Name}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if exists(name) {
			t.Errorf("%s not deleted by Close", name)
		}
	}
}

// inNamespace reports whether ip netns pids lists pid in namespace name.
func inNamespace(name string, pid int) bool {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(out)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

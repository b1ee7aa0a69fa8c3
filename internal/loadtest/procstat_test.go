package loadtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestMain lets this test binary be the child of the CPU tests: with
// LOADTEST_SPIN set it burns that much CPU and exits.
func TestMain(m *testing.M) {
	if d, err := time.ParseDuration(os.Getenv("LOADTEST_SPIN")); err == nil {
		spin(d)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// spin burns CPU until this thread has used about d of it.
func spin(d time.Duration) {
	start := CPUTime()
	x := uint64(1)
	for CPUTime()-start < d {
		for range 1_000_000 {
			x = mix64(x)
		}
	}
	if x == 0 {
		println(x)
	}
}

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (a b) c) R 1 4242 4242 0 -1 4194304 100 0 0 0 1234 56 0 0 20 0 1 0 99 1000 10\n"
	u, s, err := ParseProcStat([]byte(line))
	if err != nil || u != 1234 || s != 56 {
		t.Fatalf("utime %d, stime %d, %v; want 1234, 56", u, s, err)
	}
	for _, bad := range []string{"", "1 (x R 1 2", "1 (x) R 1 2 3", "1 (x) R 1 2 3 4 5 6 7 8 9 10 u 5 6", "1 (x) R 1 2 3 4 5 6 7 8 9 10 5 s 6"} {
		if _, _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// ProcCPU reads a real child's CPU: the figure of its ended process (a
// zombie until reaped, its times final once its last thread is gone)
// matches the rusage Wait reports, to a clock tick of each of utime and
// stime.
func TestProcCPUOfChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "LOADTEST_SPIN=300ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(time.Minute)
	// A zombie leader's figures are final only once its other threads have
	// exited too: until then their last CPU is not in them (Wait reaps only
	// after that, so its rusage has it).
	for !zombie(t, pid) || threads(t, pid) > 1 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the child did not end in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	// /proc truncates utime and stime to whole ticks each, so it may read
	// up to two ticks below the rusage, which is at least the 300ms spun.
	if want < 300*time.Millisecond || got-want > 2*ClockTick || want-got > 2*ClockTick {
		t.Fatalf("ProcCPU = %v, rusage = %v; want the rusage at least 300ms and the two within two ticks", got, want)
	}
	if _, err := ProcCPU(pid); err == nil {
		t.Error("ProcCPU of a reaped process did not fail")
	}
}

// threads counts the threads /proc lists for pid.
func threads(t *testing.T, pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func zombie(t *testing.T, pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && bytes.HasPrefix(b[i+1:], []byte(" Z"))
}

// StartChild finds the lines that say where a child serves, reads its CPU
// while it runs, and Stop ends it.
func TestStartChild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's -test.list prints the tests matching a pattern.
	ready := regexp.MustCompile(`^(TestStartChild)$`)
	other := regexp.MustCompile(`^(TestParseProcStat)$`)
	c, found, err := StartChild(context.Background(), "list", exe, []string{"-test.list", "Test(ParseProcStat|StartChild)"}, nil, ready, time.Minute, other)
	if err != nil {
		t.Fatal(err)
	}
	if found[0] != "TestParseProcStat" || found[1] != "TestStartChild" {
		t.Errorf("found %q", found)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop of a child that ended well: %v", err)
	}
	c, _, err = StartChild(context.Background(), "spin", exe, nil, []string{"LOADTEST_SPIN=1h"}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cpu time.Duration
	for deadline := time.Now().Add(time.Minute); cpu < 50*time.Millisecond && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if cpu, err = c.CPU(); err != nil {
			t.Fatal(err)
		}
	}
	if cpu < 50*time.Millisecond {
		t.Errorf("a spinning child used %v of CPU", cpu)
	}
	if err := c.Stop(); err != nil || !c.Exited() {
		t.Errorf("Stop: %v, exited %v", err, c.Exited())
	}
	_, _, err = StartChild(context.Background(), "false", exe, []string{"-test.run", "^$", "-test.bad-flag"}, nil, ready, time.Minute)
	if err == nil {
		t.Error("a child that exits before serving started")
	}
}

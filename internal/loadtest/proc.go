package loadtest

import (
	"bufio"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfStatusKB reads a "kB" field of /proc/self/status (VmRSS, VmHWM ...),
// in bytes; 0 where there is no /proc or no such field.
func SelfStatusKB(field string) int64 { return StatusKB("/proc/self/status", field) }

// PidStatusKB is SelfStatusKB for the process pid.
func PidStatusKB(pid int, field string) int64 {
	return StatusKB("/proc/"+strconv.Itoa(pid)+"/status", field)
}

// StatusKB reads a "kB" field of a /proc/*/status file at path, in bytes.
func StatusKB(path, field string) int64 {
	fh, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// LoadAvg is the first n (1 to 3) of the 1, 5 and 15 minute load averages,
// space separated, or "?" where /proc/loadavg is missing.
func LoadAvg(n int) string { return loadAvg("/proc/loadavg", n) }

func loadAvg(path string, n int) string {
	b, err := os.ReadFile(path)
	if f := strings.Fields(string(b)); err == nil && len(f) >= n {
		return strings.Join(f[:n], " ")
	}
	return "?"
}

// CPUTime is the user and system CPU time this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RunqWait is the time this process's threads spent runnable but waiting
// for a CPU (0 where /proc/self/task/*/schedstat is missing): the time
// other processes, or more threads than CPUs, took from it.
func RunqWait() time.Duration {
	tasks, _ := os.ReadDir("/proc/self/task")
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if f := strings.Fields(string(b)); err == nil && len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			ns += v
		}
	}
	return time.Duration(ns)
}

// HeapBytes reads the Go heap's object bytes (live and not yet swept)
// without stopping the world.
func HeapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// MiB formats b bytes as "N MiB".
func MiB(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

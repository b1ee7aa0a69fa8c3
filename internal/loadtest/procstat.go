package loadtest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ClockTick is USER_HZ, the unit of the CPU times in /proc/<pid>/stat:
// 100 per second on every Linux architecture Go runs on (the kernel
// reports in it whatever its internal HZ).
const ClockTick = 10 * time.Millisecond

// ProcCPU is the user plus system CPU time the process pid has used, all
// its threads (the living and the ended) included, read from
// /proc/<pid>/stat: the CPU of a child, measured apart from this process.
// Its resolution is ClockTick.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	u, s, err := ParseProcStat(b)
	if err != nil {
		return 0, fmt.Errorf("loadtest: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * ClockTick, nil
}

// ParseProcStat returns the utime and stime fields (the 14th and 15th, in
// clock ticks) of a /proc/<pid>/stat line. The command name (the 2nd
// field) is in parentheses and may hold spaces and parentheses itself, so
// the fields are counted from the last ')'.
func ParseProcStat(b []byte) (utime, stime uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("no ')' ending the command name")
	}
	// After ")": state (field 3) ... utime is field 14, so the 12th here.
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	if utime, err = strconv.ParseUint(string(f[11]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("utime: %w", err)
	}
	if stime, err = strconv.ParseUint(string(f[12]), 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stime: %w", err)
	}
	return utime, stime, nil
}

// PidRunqWait is RunqWait for the process pid: the time its threads (the
// living ones) spent runnable but waiting for a CPU, from
// /proc/<pid>/task/*/schedstat; 0 where that is missing.
func PidRunqWait(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := os.ReadDir(dir)
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if f := bytes.Fields(b); err == nil && len(f) >= 2 {
			v, _ := strconv.ParseInt(string(f[1]), 10, 64)
			ns += v
		}
	}
	return time.Duration(ns)
}

package ledger

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter starts measuring the CPU time of a benchmark's loop; the
// returned function reports it per op (cpu-ns/op, background work such as
// Pebble's flushes and compactions included), which a loaded machine
// disturbs less than the wall time. Call it after ResetTimer and defer the
// result.
func cpuMeter(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

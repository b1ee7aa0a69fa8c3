package main

import (
	"context"
	"encoding/json"
	"fmt"
	rspec "github.com/auditd/auditd/rederive/spec"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

// deriveJob compiles the measured derivation against the table at dsn.
func deriveJob(file, dsn string) (rederive.Job, error) {
	q, _ := json.Marshal(dsn)
	specs, err := rspec.Parse(file, fmt.Appendf(nil, deriveSpec, q))
	if err != nil {
		return rederive.Job{}, err
	}
	d, err := rspec.Compile(specs[0])
	if err != nil {
		return rederive.Job{}, err
	}
	return rederive.Job{Spec: specs[0], Derivation: d}, nil
}

// deriveWorkers is -workers, GOMAXPROCS for 0.
func deriveWorkers(n int) int {
	if n == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// deriveE2E is what the end-to-end run measured.
type deriveE2E struct {
	rep     *rederive.Report
	took    time.Duration
	cpu     time.Duration
	foldSec float64 // to the last entry read
	hwm     int64
	reset   bool   // VmHWM was reset before the run
	la0     string // load average at the start
}

// deriveVerify runs the measured phase: the derivation check end to end,
// then (with -split) its parts apart, then the summary against the targets.
func deriveVerify(ctx context.Context, st *ledger.Store, f benchDeriveFlags, m *deriveManifestFile, res map[string]any) error {
	job, err := deriveJob("bench-derive.yaml", f.pg)
	if err != nil {
		return err
	}
	workers := deriveWorkers(f.workers)
	e, err := deriveRunE2E(ctx, st, job, f, workers, res)
	if err != nil {
		return err
	}
	foldRate, compRate := 0.0, 0.0
	if !f.split && f.memProfile != "" {
		if err := deriveHeapProfile(f.memProfile); err != nil {
			return err
		}
	}
	if f.split {
		sr, err := deriveSplit(ctx, st, job.Spec, job.Derivation, workers, f.memProfile, res)
		if err != nil {
			return err
		}
		foldRate, compRate = sr.foldRate, sr.compareRate
	}
	return deriveSummary(e, f, m, workers, foldRate, compRate, res)
}

// deriveRunE2E runs the check once with Runner.Run, from a small heap and
// a reset peak where Linux allows, and reports its figures.
func deriveRunE2E(ctx context.Context, st *ledger.Store, job rederive.Job, f benchDeriveFlags, workers int, res map[string]any) (deriveE2E, error) {
	var e deriveE2E
	runtime.GC()
	debug.FreeOSMemory()
	rssBefore, hwmBefore := loadtest.SelfStatusKB("VmRSS"), loadtest.SelfStatusKB("VmHWM")
	e.reset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	res["rss_before_bytes"], res["hwm_before_bytes"], res["hwm_reset"] = rssBefore, hwmBefore, e.reset
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return e, err
	}
	defer stopProfile()
	gogc, limit := os.Getenv("GOGC"), debug.SetMemoryLimit(-1)
	if gogc == "" {
		gogc = "100"
	}
	res["gogc"], res["gomemlimit_bytes"] = gogc, limit
	limitText := "none"
	if limit != math.MaxInt64 {
		limitText = loadtest.MiB(limit)
	}
	fmt.Printf("derive: verify: %d workers, GOMAXPROCS %d, %d CPUs, GOGC %s, GOMEMLIMIT %s; RSS before %s (peak so far %s, reset: %v)\n",
		workers, runtime.GOMAXPROCS(0), runtime.NumCPU(), gogc, limitText, loadtest.MiB(rssBefore), loadtest.MiB(hwmBefore), e.reset)

	var foldEnd time.Time
	prog := loadtest.NewProgress("fold", int64(f.events))
	var last uint64
	r := rederive.NewRunner(rederive.LocalLedger{Store: st}, rederive.WithWorkers(workers), rederive.WithLogger(loadtest.Quiet()),
		rederive.WithProgress(func(_ string, done, total uint64) {
			prog.Add(int64(done - last))
			last = done
			if done == total && foldEnd.IsZero() {
				foldEnd = time.Now()
			}
		}))
	e.la0 = loadtest.LoadAvg(1)
	wait0, cpu0, start := loadtest.RunqWait(), loadtest.CPUTime(), time.Now()
	e.rep, err = r.Run(ctx, job, true)
	e.took, e.cpu = time.Since(start), loadtest.CPUTime()-cpu0
	wait := loadtest.RunqWait() - wait0
	prog.Done()
	stopProfile()
	e.hwm = loadtest.SelfStatusKB("VmHWM")
	if err != nil {
		return e, err
	}
	if e.rep.State == rederive.StateError {
		return e, fmt.Errorf("derive: run failed (%s): %s", e.rep.ErrorKind, e.rep.Error)
	}
	e.foldSec = e.took.Seconds()
	if !foldEnd.IsZero() {
		e.foldSec = foldEnd.Sub(start).Seconds()
	}
	deriveE2EReport(e, wait, res)
	return e, nil
}

// deriveE2EReport adds the end-to-end run's figures to res and prints them.
func deriveE2EReport(e deriveE2E, wait time.Duration, res map[string]any) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep, took := e.rep, e.took
	drift := rep.Stats.Missing + rep.Stats.Mismatched + rep.Stats.Extra
	res["seconds"], res["cpu_seconds"] = took.Seconds(), e.cpu.Seconds()
	res["state"], res["drift"], res["events_folded"], res["rows"] = rep.State, drift, rep.Events, rep.Stats.Rows
	res["e2e_fold_seconds"], res["e2e_after_fold_seconds"] = e.foldSec, took.Seconds()-e.foldSec
	res["peak_rss_bytes"], res["gc_cycles"], res["gc_pause_seconds"] = e.hwm, ms.NumGC, float64(ms.PauseTotalNs)/1e9
	res["load_average"], res["runnable_wait_seconds"] = e.la0+" "+loadtest.LoadAvg(1), wait.Seconds()
	fmt.Printf("derive: end to end: %.2fs, %.2f CPU-s, %.2f s runnable waiting for a CPU (load average %s at the start, %s at the end)\n",
		took.Seconds(), e.cpu.Seconds(), wait.Seconds(), e.la0, loadtest.LoadAvg(1))
	fmt.Printf("derive:   state %s, %d events, %d keys, %d rows, %d drift; peak RSS %s; %d GCs, %.2fs of pauses\n",
		rep.State, rep.Events, rep.Keys, rep.Stats.Rows, drift, loadtest.MiB(e.hwm), ms.NumGC, float64(ms.PauseTotalNs)/1e9)
	fmt.Printf("derive:   fold (to the last entry read) %.2fs = %.0f events/s; then merge, export and compare %.2fs = %.0f rows/s\n",
		e.foldSec, float64(rep.Events)/e.foldSec, took.Seconds()-e.foldSec, float64(rep.Stats.Rows)/(took.Seconds()-e.foldSec))
}

// deriveSummary prints the measures against the targets, sets res["pass"],
// and fails unless the run was clean.
func deriveSummary(e deriveE2E, f benchDeriveFlags, m *deriveManifestFile, workers int, foldRate, compRate float64, res map[string]any) error {
	rep, took := e.rep, e.took
	drift := rep.Stats.Missing + rep.Stats.Mismatched + rep.Stats.Extra
	status := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Println()
	fmt.Printf("derive: %d events into %d keys (%d rows in PostgreSQL), %d workers on %d CPUs\n", rep.Events, rep.Keys, rep.Stats.Rows, workers, runtime.NumCPU())
	fmt.Printf("  %-34s %-22s %-14s %s\n", "measure", "value", "target", "result")
	line := func(name, value, target string, ok bool) {
		fmt.Printf("  %-34s %-22s %-14s %s\n", name, value, target, status(ok))
	}
	if v, ok := res["load_seconds"].(float64); ok {
		fmt.Printf("  %-34s %-22s %-14s %s\n", "load (append to checkpoint)", fmt.Sprintf("%.1f s", v), "-", "(excluded)")
	}
	if v, ok := res["open_seconds"].(float64); ok {
		fmt.Printf("  %-34s %-22s %-14s %s\n", "open the ledger", fmt.Sprintf("%.1f s", v), "-", "(excluded)")
	}
	e2eOK := took.Seconds() < deriveTargetSeconds
	line("end to end (Runner.Run)", fmt.Sprintf("%.1f s (%.1f CPU-s)", took.Seconds(), e.cpu.Seconds()), "< 60 s", e2eOK)
	runFoldRate := float64(rep.Events) / e.foldSec
	foldTarget, compTarget := fmt.Sprintf(">= %.0f/s", deriveTargetFoldRate), fmt.Sprintf(">= %.0f/s", deriveTargetCompRate)
	line("fold within the run (to last read)", fmt.Sprintf("%.0f events/s", runFoldRate), foldTarget, runFoldRate >= deriveTargetFoldRate)
	// On a shared machine the wall rates say how busy it is: the whole
	// run's CPU time, spread over GOMAXPROCS CPUs, bounds the fold's rate on
	// CPUs of its own from below.
	cpuRate := float64(rep.Events) / (e.cpu.Seconds() / float64(runtime.GOMAXPROCS(0)))
	fmt.Printf("  %-34s %-22s %-14s %s\n", "whole run on idle CPUs (CPU-s)", fmt.Sprintf("%.0f events/s", cpuRate), foldTarget, "(events / (CPU-s / GOMAXPROCS))")
	res["events_per_cpu_rate"] = cpuRate
	foldOK := foldRate >= deriveTargetFoldRate
	compOK := compRate >= deriveTargetCompRate
	if f.split {
		line("Fold alone (split run)", fmt.Sprintf("%.0f events/s", foldRate), foldTarget, foldOK)
		line("Compare alone with PostgreSQL", fmt.Sprintf("%.0f rows/s", compRate), compTarget, compOK)
	}
	stateOK := rep.State == rederive.StateClean && drift == 0 && rep.Events == uint64(f.events) && rep.Stats.Matched == int64(m.Accounts)
	line("state", fmt.Sprintf("%s, %d drift", rep.State, drift), "clean, 0", stateOK)
	hwmNote := ""
	if !e.reset && f.phase == "all" {
		hwmNote = " (incl. load)"
	}
	memOK := e.hwm < deriveTargetPeakRSS
	line("peak RSS"+hwmNote, loadtest.MiB(e.hwm), "< 2048 MiB", memOK)
	fmt.Printf("  (wall times; load average %s when the run started: other processes sharing the CPUs slow them, not the CPU-s)\n", e.la0)
	if f.events < deriveTargetEventCount {
		fmt.Printf("  (a run of %d events: the targets are for %d)\n", f.events, deriveTargetEventCount)
	}
	if !f.split {
		foldOK, compOK = runFoldRate >= deriveTargetFoldRate, true
	}
	res["pass"] = e2eOK && foldOK && compOK && stateOK && memOK
	if !stateOK {
		return fmt.Errorf("derive: the run is %s with %d drift (%d missing, %d mismatched, %d extra), %d derivation errors",
			rep.State, drift, rep.Stats.Missing, rep.Stats.Mismatched, rep.Stats.Extra, rep.DerivationErrors)
	}
	return nil
}

// deriveHeapProfile writes a heap profile of the live objects (after a
// collection) and of the allocations so far.
func deriveHeapProfile(path string) error {
	runtime.GC()
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(pf, 0); err != nil {
		pf.Close()
		return err
	}
	return pf.Close()
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
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

// deriveVerify runs the measured phase: the derivation check end to end,
// then (with -split) its parts apart.
func deriveVerify(ctx context.Context, st *ledger.Store, f benchDeriveFlags, m *deriveManifestFile, res map[string]any) error {
	dsn, _ := json.Marshal(f.pg)
	specs, err := rederive.ParseSpecs("bench-derive.yaml", fmt.Appendf(nil, deriveSpec, dsn))
	if err != nil {
		return err
	}
	spec := specs[0]
	d, err := rederive.Compile(spec)
	if err != nil {
		return err
	}
	workers := f.workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	quiet := loadtest.Quiet()

	// Start from a small heap, and from a reset peak where Linux allows.
	runtime.GC()
	debug.FreeOSMemory()
	rssBefore, hwmBefore := loadtest.SelfStatusKB("VmRSS"), loadtest.SelfStatusKB("VmHWM")
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	res["rss_before_bytes"], res["hwm_before_bytes"], res["hwm_reset"] = rssBefore, hwmBefore, reset
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
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
		workers, runtime.GOMAXPROCS(0), runtime.NumCPU(), gogc, limitText, loadtest.MiB(rssBefore), loadtest.MiB(hwmBefore), reset)

	var foldEnd time.Time
	prog := loadtest.NewProgress("fold", int64(f.events))
	var last uint64
	r := &rederive.Runner{
		Ledger:  rederive.LocalLedger{Store: st},
		Workers: workers,
		Logger:  quiet,
		Progress: func(_ string, done, total uint64) {
			prog.Add(int64(done - last))
			last = done
			if done == total && foldEnd.IsZero() {
				foldEnd = time.Now()
			}
		},
	}
	la0 := loadtest.LoadAvg(1)
	wait0 := loadtest.RunqWait()
	cpu0 := loadtest.CPUTime()
	start := time.Now()
	rep, err := r.Run(ctx, rederive.Job{Spec: spec, Derivation: d}, true)
	took := time.Since(start)
	cpu := loadtest.CPUTime() - cpu0
	wait := loadtest.RunqWait() - wait0
	prog.Done()
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	hwm := loadtest.SelfStatusKB("VmHWM")
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if rep.State == rederive.StateError {
		return fmt.Errorf("derive: run failed (%s): %s", rep.ErrorKind, rep.Error)
	}
	drift := rep.Stats.Missing + rep.Stats.Mismatched + rep.Stats.Extra
	foldSec := took.Seconds()
	if !foldEnd.IsZero() {
		foldSec = foldEnd.Sub(start).Seconds()
	}
	res["seconds"], res["cpu_seconds"] = took.Seconds(), cpu.Seconds()
	res["state"], res["drift"], res["events_folded"], res["rows"] = rep.State, drift, rep.Events, rep.Stats.Rows
	res["e2e_fold_seconds"], res["e2e_after_fold_seconds"] = foldSec, took.Seconds()-foldSec
	res["peak_rss_bytes"], res["gc_cycles"], res["gc_pause_seconds"] = hwm, ms.NumGC, float64(ms.PauseTotalNs)/1e9
	res["load_average"], res["runnable_wait_seconds"] = la0+" "+loadtest.LoadAvg(1), wait.Seconds()
	fmt.Printf("derive: end to end: %.2fs, %.2f CPU-s, %.2f s runnable waiting for a CPU (load average %s at the start, %s at the end)\n",
		took.Seconds(), cpu.Seconds(), wait.Seconds(), la0, loadtest.LoadAvg(1))
	fmt.Printf("derive:   state %s, %d events, %d keys, %d rows, %d drift; peak RSS %s; %d GCs, %.2fs of pauses\n",
		rep.State, rep.Events, rep.Keys, rep.Stats.Rows, drift, loadtest.MiB(hwm), ms.NumGC, float64(ms.PauseTotalNs)/1e9)
	fmt.Printf("derive:   fold (to the last entry read) %.2fs = %.0f events/s; then merge, export and compare %.2fs = %.0f rows/s\n",
		foldSec, float64(rep.Events)/foldSec, took.Seconds()-foldSec, float64(rep.Stats.Rows)/(took.Seconds()-foldSec))

	foldRate, compRate := 0.0, 0.0
	if !f.split && f.memProfile != "" {
		if err := deriveHeapProfile(f.memProfile); err != nil {
			return err
		}
	}
	if f.split {
		sr, err := deriveSplit(ctx, st, spec, d, workers, f.memProfile, res)
		if err != nil {
			return err
		}
		foldRate, compRate = sr.foldRate, sr.compareRate
	}

	status := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	full := f.events >= deriveTargetEventCount
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
	line("end to end (Runner.Run)", fmt.Sprintf("%.1f s (%.1f CPU-s)", took.Seconds(), cpu.Seconds()), "< 60 s", e2eOK)
	runFoldRate := float64(rep.Events) / foldSec
	line("fold within the run (to last read)", fmt.Sprintf("%.0f events/s", runFoldRate), ">= 500000/s", runFoldRate >= deriveTargetFoldRate)
	foldOK := foldRate >= deriveTargetFoldRate
	compOK := compRate >= deriveTargetCompRate
	if f.split {
		line("Fold alone (split run)", fmt.Sprintf("%.0f events/s", foldRate), ">= 500000/s", foldOK)
		line("Compare alone with PostgreSQL", fmt.Sprintf("%.0f rows/s", compRate), ">= 500000/s", compOK)
	}
	stateOK := rep.State == rederive.StateClean && drift == 0 && rep.Events == uint64(f.events) && rep.Stats.Matched == int64(m.Accounts)
	line("state", fmt.Sprintf("%s, %d drift", rep.State, drift), "clean, 0", stateOK)
	hwmNote := ""
	if !reset && f.phase == "all" {
		hwmNote = " (incl. load)"
	}
	memOK := hwm < deriveTargetPeakRSS
	line("peak RSS"+hwmNote, loadtest.MiB(hwm), "< 2048 MiB", memOK)
	fmt.Printf("  (wall times; load average %s when the run started: other processes sharing the CPUs slow them, not the CPU-s)\n", la0)
	if !full {
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

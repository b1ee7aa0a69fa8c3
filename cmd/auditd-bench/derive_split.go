package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/fold"
	rspec "github.com/auditd/auditd/rederive/spec"
	rstore "github.com/auditd/auditd/rederive/store"
	"runtime"
	"sync"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
)

type deriveSplitResult struct {
	foldRate, compareRate float64
}

// deriveSplit times Fold and Compare apart, and the parts below them:
// reading the log (Pebble and the entry decoding), reading and preparing
// events (JSON decoding and the key expression), exporting the states and
// scanning the table. Each part reports its wall time and the process's
// CPU time, whose rate per GOMAXPROCS CPUs is what the part would reach
// on CPUs of its own (the machine may be shared).
func deriveSplit(ctx context.Context, st *ledger.Store, spec *rspec.Spec, d fold.Derivation, workers int, memProfile string, res map[string]any) (deriveSplitResult, error) {
	var out deriveSplitResult
	lg := rederive.LocalLedger{Store: st}
	pin, ok, err := lg.Pin(ctx, deriveLog)
	if err != nil || !ok {
		return out, fmt.Errorf("derive: no checkpoint of %s: %v", deriveLog, err)
	}
	fmt.Printf("\nderive: split run: the parts timed apart (%d workers; load average %s)\n", workers, loadtest.LoadAvg(1))
	fmt.Printf("  %-44s %8s %8s  %18s  %s\n", "part", "wall", "CPU", "rate (wall)", "rate (CPU-s / GOMAXPROCS)")
	sp := splitParts{ctx: ctx, reader: lg.Reader(deriveLog, pin), pin: pin, n: pin.Size, workers: workers, res: res}
	expected, err := sp.fold(spec, d, memProfile, &out)
	if err != nil {
		return out, err
	}
	out.compareRate, err = sp.compare(spec, expected)
	return out, err
}

// splitParts are the parts of a check deriveSplit times.
type splitParts struct {
	ctx     context.Context
	reader  fold.LogReader
	pin     fold.Pin
	n       uint64
	workers int
	res     map[string]any
}

// part times fn, which returns the units it handled, and prints its rates.
func (sp splitParts) part(key, name, unit string, fn func() (float64, error)) (float64, error) {
	procs := float64(runtime.GOMAXPROCS(0))
	runtime.GC()
	t0, c0 := time.Now(), loadtest.CPUTime()
	units, err := fn()
	took, cpu := time.Since(t0), loadtest.CPUTime()-c0
	if err != nil {
		return 0, err
	}
	rate, cpuRate := units/took.Seconds(), units/(cpu.Seconds()/procs)
	fmt.Printf("  %-44s %7.2fs %7.2fs  %10.0f %-7s  %10.0f %s/s\n", name, took.Seconds(), cpu.Seconds(), rate, unit+"/s", cpuRate, unit)
	sp.res["split_"+key+"_seconds"], sp.res["split_"+key+"_cpu_seconds"] = took.Seconds(), cpu.Seconds()
	return rate, nil
}

// fold times reading, preparing, folding and exporting, and returns the
// exported states.
func (sp splitParts) fold(spec *rspec.Spec, d fold.Derivation, memProfile string, out *deriveSplitResult) (map[string]any, error) {
	ctx, reader, n := sp.ctx, sp.reader, sp.n
	// Read only: workers goroutines on disjoint ranges, as Fold reads.
	_, err := sp.part("read", "read the log (Pebble + entry decoding)", "events", func() (float64, error) {
		return float64(n), deriveRanges(sp.workers, n, func(from, to uint64) error {
			return reader.Entries(ctx, from, to, func(*ledger.Record) error { return nil })
		})
	})
	if err != nil {
		return nil, err
	}
	// Read and prepare: JSON decoding, the key expression.
	_, err = sp.part("prepare", "read + Prepare (JSON decode, key expression)", "events", func() (float64, error) {
		return float64(n), deriveRanges(sp.workers, n, func(from, to uint64) error {
			return reader.Entries(ctx, from, to, func(r *ledger.Record) error {
				ev := fold.Event{Log: deriveLog, Index: r.Index, ID: r.Leaf.ID, Time: time.Unix(0, r.Leaf.Time).UTC(), Payload: r.Payload}
				_, _, err := d.Prepare(&ev)
				return err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	// Fold: the above, plus the steps by key and the merge of the shards.
	var fr *fold.Result
	out.foldRate, err = sp.part("fold", "Fold (read, prepare, step, merge)", "events", func() (float64, error) {
		var err error
		fr, err = fold.Fold(ctx, d, nil, []fold.Span{{Reader: reader, From: 0, To: n, Pin: sp.pin}},
			fold.Options{Workers: sp.workers, ErrorBudget: spec.ErrorBudget, Fingerprint: rspec.Fingerprint(spec)})
		if err != nil {
			return 0, err
		}
		return float64(fr.Events), nil
	})
	if err != nil {
		return nil, err
	}
	sp.res["fold_events_per_second"] = out.foldRate
	expected := make(map[string]any, len(fr.States))
	_, err = sp.part("export", "export the states (as Runner.Run does)", "keys", func() (float64, error) {
		for k, s := range fr.States {
			v, err := fold.Export(d, k, s)
			if err != nil {
				return 0, err
			}
			expected[k] = v
		}
		return float64(len(expected)), nil
	})
	if err != nil {
		return nil, err
	}
	if memProfile != "" {
		if err := deriveHeapProfile(memProfile); err != nil {
			return nil, err
		}
		runtime.KeepAlive(fr)
	}
	return expected, nil
}

// compare times scanning the table and comparing it with expected, and
// returns the rate of the comparison.
func (sp splitParts) compare(spec *rspec.Spec, expected map[string]any) (float64, error) {
	ctx := sp.ctx
	store, err := rstore.Open(ctx, spec.Store)
	if err != nil {
		return 0, err
	}
	defer store.Close()
	_, err = sp.part("scan", "scan the table (PostgreSQL, pgx, values)", "rows", func() (float64, error) {
		var rows int64
		err := store.Scan(ctx, func(rstore.Row) error { rows++; return nil })
		return float64(rows), err
	})
	if err != nil {
		return 0, err
	}
	var drift int
	rate, err := sp.part("compare", "Compare (scan, look up, equal)", "rows", func() (float64, error) {
		stats, err := compare.Compare(ctx, store, expected, spec.Compare, func(compare.Drift) error { drift++; return nil })
		return float64(stats.Rows), err
	})
	if err != nil {
		return 0, err
	}
	sp.res["compare_rows_per_second"] = rate
	if drift != 0 {
		return 0, fmt.Errorf("derive: split run: %d drift", drift)
	}
	return rate, nil
}

// deriveRanges runs fn on workers disjoint ranges covering [0, n).
func deriveRanges(workers int, n uint64, fn func(from, to uint64) error) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			errs[w] = fn(uint64(w)*n/uint64(workers), uint64(w+1)*n/uint64(workers))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

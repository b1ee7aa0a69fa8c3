package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
)

// runAppend is the append mode: durable appends to an in-process ledger.
func runAppend(args []string) error {
	f, err := parseBenchFlags("append", args)
	if err != nil {
		return done(err)
	}
	res, err := benchAppend(context.Background(), f)
	if err != nil {
		return err
	}
	return writeJSON(f.jsonOut, f.mode, res)
}

// appendLog is one log the append mode writes, with its checkpoint tracker.
type appendLog struct {
	log     *ledger.Log
	tracker *loadtest.CheckpointTracker
}

func benchAppend(ctx context.Context, f benchFlags) (map[string]any, error) {
	dir, cleanup, err := loadtest.DataDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	st, _, _, err := loadtest.OpenLedger(dir, "bench.local")
	if err != nil {
		return nil, err
	}
	defer st.Close()
	logs := make([]appendLog, f.logs)
	for i := range logs {
		name := f.log
		if f.logs > 1 {
			name = fmt.Sprintf("%s.%d", f.log, i)
		}
		l, err := st.CreateLog(name)
		if err != nil {
			return nil, err
		}
		logs[i] = appendLog{l, &loadtest.CheckpointTracker{}}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchers sync.WaitGroup
	for _, l := range logs {
		watchers.Go(func() { watchCheckpoints(wctx, l) })
	}
	reqs := (f.events + f.batch - 1) / f.batch
	batches := appendBatches(f, reqs)
	var appendLat loadtest.Latencies
	elapsed, err := loadtest.Drive("append", f.producers, reqs, int64(f.batch), func(_, r int) error {
		es := batches[r]
		batches[r] = nil
		l := logs[r%len(logs)]
		t0 := time.Now()
		res, err := l.log.Append(ctx, es)
		if err != nil {
			return err
		}
		appendLat.Add(time.Since(t0))
		l.tracker.Acked(res.Size, t0)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Wait for the last checkpoints so every request is timed.
	for _, l := range logs {
		for l.tracker.Waiting() > 0 {
			if _, err := l.log.WaitCheckpoint(ctx, l.log.Size()); err != nil {
				return nil, err
			}
			time.Sleep(time.Millisecond)
		}
	}
	stopWatch()
	watchers.Wait()
	var cpLat loadtest.Latencies
	for _, l := range logs {
		cpLat.Merge(l.tracker.Latencies())
	}
	res := appendResults(f, reqs*f.batch, elapsed, &appendLat, &cpLat)
	if f.storage {
		if err := reportStorage(st, reqs*f.batch, f.payload, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// watchCheckpoints tells l's tracker of each new checkpoint until ctx ends.
func watchCheckpoints(ctx context.Context, l appendLog) {
	for next := uint64(1); ; {
		cp, err := l.log.WaitCheckpoint(ctx, next)
		if err != nil {
			return
		}
		l.tracker.Checkpoint(cp.Size, time.Now())
		next = cp.Size + 1
	}
}

// appendBatches makes the requests' events before the clock starts, so
// that the run measures the ledger, not the generator. Every id and
// payload is unique.
func appendBatches(f benchFlags, reqs int) [][]ledger.Entry {
	fmt.Printf("bench: generating %d events ...\n", reqs*f.batch)
	batches := make([][]ledger.Entry, reqs)
	var gen sync.WaitGroup
	for p := range 2 {
		gen.Go(func() {
			g := loadtest.NewEventGen(uint64(p)+1, f.payload, f.random)
			for r := p; r < reqs; r += 2 {
				es := make([]ledger.Entry, f.batch)
				for i := range es {
					pl, isJSON := g.Payload()
					es[i] = ledger.Entry{ID: g.ID(), Payload: pl, PayloadJSON: isJSON}
				}
				batches[r] = es
			}
		})
	}
	gen.Wait()
	return batches
}

func appendResults(f benchFlags, n int, elapsed time.Duration, appendLat, cpLat *loadtest.Latencies) map[string]any {
	ms := loadtest.MS
	res := map[string]any{
		"events": n, "seconds": elapsed.Seconds(), "events_per_second": float64(n) / elapsed.Seconds(),
		"append_p50_ms": ms(appendLat.Pct(.5)), "append_p99_ms": ms(appendLat.Pct(.99)),
		"checkpoint_p50_ms": ms(cpLat.Pct(.5)), "checkpoint_p99_ms": ms(cpLat.Pct(.99)),
		"logs": f.logs, "producers": f.producers, "batch": f.batch, "payload_bytes": f.payload,
	}
	fmt.Printf("append: %d events in %.2fs = %.0f events/s (%d logs, %d producers, %d per request, %d-byte payloads)\n",
		n, elapsed.Seconds(), res["events_per_second"], f.logs, f.producers, f.batch, f.payload)
	fmt.Printf("append latency (request to durable ack): p50 %.1f ms  p99 %.1f ms\n", res["append_p50_ms"], res["append_p99_ms"])
	fmt.Printf("append to covering signed checkpoint:    p50 %.1f ms  p99 %.1f ms\n", res["checkpoint_p50_ms"], res["checkpoint_p99_ms"])
	return res
}

func reportStorage(st *ledger.Store, n, payload int, res map[string]any) error {
	fmt.Println("storage: compacting ...")
	if err := st.Compact(); err != nil {
		return err
	}
	u, err := st.DiskUsage()
	if err != nil {
		return err
	}
	per := func(b uint64) float64 { return float64(b) / float64(n) }
	fmt.Printf("storage: %d entries with %d-byte payloads (payload bytes are incompressible only with -random-payload)\n", n, payload)
	fmt.Printf("storage:   live tables    %12d bytes  %7.1f bytes/entry  %7.1f beyond the payload\n", u.Tables, per(u.Tables), per(u.Tables)-float64(payload))
	kinds := make([]string, 0, len(u.ByKind))
	for k := range u.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Printf("storage:     %-16s %12d bytes  %7.1f bytes/entry\n", k, u.ByKind[k], per(u.ByKind[k]))
	}
	fmt.Printf("storage:   WAL            %12d bytes  (bounded by the memtables, not by the entries)\n", u.WAL)
	fmt.Printf("storage:   other          %12d bytes  (obsolete tables awaiting deletion, manifest, options)\n", u.Other)
	fmt.Printf("storage:   total on disk  %12d bytes  %7.1f bytes/entry\n", u.Total, per(u.Total))
	res["disk_bytes"] = u.Total
	res["table_bytes"] = u.Tables
	res["bytes_per_entry_beyond_payload"] = per(u.Tables) - float64(payload)
	res["table_bytes_by_kind"] = u.ByKind
	return nil
}

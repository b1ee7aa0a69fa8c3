package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
)

// benchKafkaSource consumes the topic with the Kafka source into a fresh
// ledger in this process, as serve wires them.
func benchKafkaSource(ctx context.Context, broker string, total, rssFilled int64, f kafkaFlags, res map[string]any) (map[string]any, error) {
	dir, cleanup, err := loadtest.DataDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	store, _, _, err := loadtest.OpenLedger(dir, "bench.local")
	if err != nil {
		return nil, err
	}
	defer store.Close()
	src, err := ingest.NewKafka(store, ingest.KafkaConfig{Brokers: []string{broker}, Topics: []string{"bench"},
		Group: "auditd-bench", BatchRecords: f.batch}, loadtest.Quiet())
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, c := range append(src.Collectors(), store.Collectors()...) {
		reg.MustRegister(c)
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	fmt.Printf("bench: consuming into a ledger in %s ...\n", dir)
	cpu0 := loadtest.CPUTime()
	start := time.Now()
	samples, first, err := consumeAll(ctx, src, store, total, start)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	cpu := loadtest.CPUTime() - cpu0
	stopProfile()
	kafkaSourceReport(reg, total, rssFilled, res, f, kafkaRun{elapsed: elapsed, cpu: cpu, first: first, samples: samples})
	return res, nil
}

// startCPUProfile starts a CPU profile to path, if set; stop may be called
// more than once.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	pf, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, err
	}
	stopped := false
	return func() {
		if !stopped {
			stopped = true
			pprof.StopCPUProfile()
			pf.Close()
		}
	}, nil
}

// consumeAll runs src until the store's logs hold total entries, sampling
// the memory every 250 ms, and returns the samples and the time to the
// first entry.
func consumeAll(ctx context.Context, src *ingest.Kafka, store *ledger.Store, total int64, start time.Time) ([]rssSample, time.Duration, error) {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx) }()
	var samples []rssSample
	var first time.Duration
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := start
	for {
		var n int64
		for _, li := range store.Logs() {
			n += int64(li.Size)
		}
		now := time.Since(start)
		if n > 0 && first == 0 {
			first = now
		}
		samples = append(samples, rssSample{at: now, entries: n, rss: loadtest.SelfStatusKB("VmRSS"), heap: loadtest.HeapBytes()})
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "kafka: %d/%d (%.0f%%), %.0f/s, RSS %s\n", n, total, 100*float64(n)/float64(total), float64(n)/now.Seconds(), loadtest.MiB(samples[len(samples)-1].rss))
		}
		if n >= total {
			break
		}
		select {
		case err := <-done:
			return nil, 0, fmt.Errorf("kafka: the source stopped at %d of %d records: %v", n, total, err)
		case <-tick.C:
		}
	}
	stop()
	return samples, first, <-done
}

// kafkaRun is what a consuming run measured.
type kafkaRun struct {
	elapsed, cpu, first time.Duration
	samples             []rssSample
}

// kafkaSourceReport adds the in-process run's figures to res and prints them.
func kafkaSourceReport(reg *prometheus.Registry, total, rssFilled int64, res map[string]any, f kafkaFlags, r kafkaRun) {
	q := func(name string, p float64) float64 { return loadtest.HistQuantile(reg, name, p) }
	mib := loadtest.MiB
	rate := float64(total) / r.elapsed.Seconds()
	steady := steadyRate(r.samples, total)
	p50, p99 := q("kafka_fetch_to_durable_seconds", .5), q("kafka_fetch_to_durable_seconds", .99)
	peak := loadtest.SelfStatusKB("VmHWM")
	lo, hi := rssRange(r.samples)
	res["seconds"] = r.elapsed.Seconds()
	res["records_per_second"] = rate
	res["steady_records_per_second"] = steady
	res["first_entry_seconds"] = r.first.Seconds()
	res["cpu_seconds"] = r.cpu.Seconds()
	res["fetch_to_durable_p50_ms"] = p50 * 1000
	res["fetch_to_durable_p99_ms"] = p99 * 1000
	res["rss_peak_bytes"] = peak
	res["rss_consuming_min_bytes"] = lo
	res["rss_consuming_max_bytes"] = hi
	res["rss_samples"] = rssSeries(r.samples, 12)
	fmt.Printf("kafka:   %d records in %.2fs = %.0f records/s broker to durable ledger entries (%d partitions, %d-byte values); first entry after %.0f ms; between 10%% and 90%%: %.0f records/s\n",
		total, r.elapsed.Seconds(), rate, f.partitions, f.valueBytes, loadtest.MS(r.first), steady)
	res["cpu_us_per_record"] = r.cpu.Seconds() * 1e6 / float64(total)
	fmt.Printf("cpu:     %.1f s of CPU for the consuming phase (%.1f cores of %d; broker, client and ledger share the process), %.2f us per record\n",
		r.cpu.Seconds(), r.cpu.Seconds()/r.elapsed.Seconds(), runtime.NumCPU(), res["cpu_us_per_record"])
	commitP50, commitP99 := q("ledger_commit_duration_seconds", .5), q("ledger_commit_duration_seconds", .99)
	appendP50, appendP99 := q("ledger_append_duration_seconds", .5), q("ledger_append_duration_seconds", .99)
	batchP50 := q("ledger_commit_batch_entries", .5)
	res["ledger_commit_p50_ms"], res["ledger_commit_p99_ms"] = commitP50*1000, commitP99*1000
	res["ledger_append_p50_ms"], res["ledger_append_p99_ms"] = appendP50*1000, appendP99*1000
	res["ledger_commit_entries_p50"] = batchP50
	fmt.Printf("ledger:  one group commit (write and sync) p50 %.0f ms p99 %.0f ms, ~%.0f entries; a request's wait in the ledger p50 %.0f ms p99 %.0f ms\n",
		commitP50*1000, commitP99*1000, batchP50, appendP50*1000, appendP99*1000)
	fmt.Printf("latency: poll to durable (per partition batch, Prometheus buckets of x2, interpolated): p50 %.0f ms  p99 %.0f ms; a backlog run measures mostly queueing\n", p50*1000, p99*1000)
	res["rss_median_bytes"] = rssMedian(r.samples)
	fmt.Printf("memory:  peak RSS (VmHWM) %s, of which the broker ~%s; RSS while consuming %s .. %s, median %s (%s above the filled broker at most)\n",
		mib(peak), mib(rssFilled-res["rss_start_bytes"].(int64)), mib(lo), mib(hi), mib(rssMedian(r.samples)), mib(hi-rssFilled))
	fmt.Printf("memory:  over the run (time:entries:RSS/Go heap): %s\n", strings.Join(rssSeries(r.samples, 12), " "))
	fmt.Printf("memory:  the broker's records are live Go heap here, and the GC lets the heap grow to about twice its live size\n" +
		"         (GOGC=100): the growth above the broker overstates the source's own memory; -daemon measures auditd serve alone\n")
	res["load_average_end"] = loadtest.LoadAvg(3)
	fmt.Printf("bench: load average %s at the end (other processes share the CPUs)\n", res["load_average_end"])
}

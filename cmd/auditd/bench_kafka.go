package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
)

const benchKafkaUsage = `Usage: auditd bench kafka [flags]

Measures Kafka ingestion: starts a Kafka-protocol broker in this process
(kfake), fills a topic first (timed separately), then consumes it with the
Kafka source into a fresh ledger and reports records per second from the
broker to durable ledger entries, fetch-to-durable latency, and memory.

The broker holds every record in this process's memory, so the resident set
includes it: the run reports the broker's share (measured after the fill)
apart from what consuming adds.

`

type benchKafkaFlags struct {
	records     int
	partitions  int
	valueBytes  int
	batch       int
	compression string
	dir         string
	cpuProfile  string
	jsonOut     string
	fetchOnly   bool
	daemon      bool
}

func benchKafka(args []string) error {
	var f benchKafkaFlags
	fs := flag.NewFlagSet("bench kafka", flag.ContinueOnError)
	fs.IntVar(&f.records, "records", 1_000_000, "records to produce, then consume")
	fs.IntVar(&f.partitions, "partitions", 4, "partitions of the topic (one ledger log each)")
	fs.IntVar(&f.valueBytes, "value-bytes", 256, "bytes of each record's value (a JSON object)")
	fs.IntVar(&f.batch, "batch-records", 0, "records per ledger request per partition (0: the source's default)")
	fs.StringVar(&f.compression, "compression", "none", "producer compression: none, snappy, lz4 or zstd")
	fs.StringVar(&f.dir, "data-dir", "", "ledger data directory (default: a temporary one, removed after)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the consuming phase to this file")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&f.fetchOnly, "fetch-only", false, "only fetch the records with a Kafka client, no ledger: the broker and client's share")
	fs.BoolVar(&f.daemon, "daemon", false, "consume with \"auditd serve\" run as a child process (its own memory, measured apart from the broker's)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchKafkaUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if f.records < 1 || f.partitions < 1 || f.valueBytes < 64 || f.batch < 0 {
		return errors.New("bench kafka: -records and -partitions must be positive, -value-bytes at least 64")
	}
	codec, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[f.compression]
	if !ok {
		return fmt.Errorf("bench kafka: unknown -compression %q", f.compression)
	}
	res, err := runBenchKafka(context.Background(), f, codec)
	if err != nil {
		return err
	}
	res["mode"] = "kafka"
	if f.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		return os.WriteFile(f.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

func runBenchKafka(ctx context.Context, f benchKafkaFlags, codec kgo.CompressionCodec) (map[string]any, error) {
	res := map[string]any{"records": f.records, "partitions": f.partitions, "value_bytes": f.valueBytes,
		"compression": f.compression, "gomaxprocs": runtime.GOMAXPROCS(0)}
	rssStart := procStatusKB("VmRSS")
	fmt.Printf("bench: %d CPUs, load average %s\n", runtime.NumCPU(), loadAvg())

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(f.partitions), "bench"))
	if err != nil {
		return nil, fmt.Errorf("bench kafka: broker: %w", err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]

	// Fill the topic first: production is not part of the measurement.
	fmt.Printf("bench: producing %d records of %d bytes to %d partitions (in-process kfake at %s) ...\n", f.records, f.valueBytes, f.partitions, broker)
	start := time.Now()
	produced, err := fillBenchTopic(ctx, broker, f, codec)
	if err != nil {
		return nil, err
	}
	prodSecs := time.Since(start).Seconds()
	var total int64
	for _, n := range produced {
		total += n
	}
	runtime.GC()
	debug.FreeOSMemory()
	rssFilled := procStatusKB("VmRSS")
	res["produce_seconds"] = prodSecs
	res["produce_records_per_second"] = float64(total) / prodSecs
	res["rss_start_bytes"] = rssStart
	res["rss_after_fill_bytes"] = rssFilled
	res["broker_rss_bytes"] = rssFilled - rssStart
	fmt.Printf("produce: %d records in %.2fs = %.0f records/s (not part of the measurement)\n", total, prodSecs, float64(total)/prodSecs)
	fmt.Printf("memory:  RSS %s at the start, %s with the topic filled: the broker holds ~%s (%.0f bytes/record)\n",
		mib(rssStart), mib(rssFilled), mib(rssFilled-rssStart), float64(rssFilled-rssStart)/float64(total))

	if f.fetchOnly {
		return benchFetchOnly(ctx, broker, total, f, res)
	}
	if f.daemon {
		return benchKafkaDaemon(ctx, broker, total, f, res)
	}

	// A fresh ledger and the Kafka source, as serve wires them.
	dir, cleanup, err := benchDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	store, err := openBenchLedger(dir)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	src, err := ingest.NewKafka(store, ingest.KafkaConfig{Brokers: []string{broker}, Topics: []string{"bench"},
		Group: "auditd-bench", BatchRecords: f.batch}, quiet)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, c := range append(src.Collectors(), store.Collectors()...) {
		reg.MustRegister(c)
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}

	fmt.Printf("bench: consuming into a ledger in %s ...\n", dir)
	cpu0 := cpuTime()
	start = time.Now()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx) }()
	var samples []rssSample
	var first time.Duration
	tick := time.NewTicker(250 * time.Millisecond)
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
		samples = append(samples, rssSample{at: now, entries: n, rss: procStatusKB("VmRSS"), heap: heapBytes()})
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "kafka: %d/%d (%.0f%%), %.0f/s, RSS %s\n", n, total, 100*float64(n)/float64(total), float64(n)/now.Seconds(), mib(samples[len(samples)-1].rss))
		}
		if n >= total {
			break
		}
		select {
		case err := <-done:
			stop()
			return nil, fmt.Errorf("bench kafka: the source stopped at %d of %d records: %v", n, total, err)
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	tick.Stop()
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	pprof.StopCPUProfile()

	rate := float64(total) / elapsed.Seconds()
	steady := steadyRate(samples, total)
	p50, p99 := histQuantile(reg, "kafka_fetch_to_durable_seconds", .5), histQuantile(reg, "kafka_fetch_to_durable_seconds", .99)
	peak := procStatusKB("VmHWM")
	lo, hi := rssRange(samples)
	res["seconds"] = elapsed.Seconds()
	res["records_per_second"] = rate
	res["steady_records_per_second"] = steady
	res["first_entry_seconds"] = first.Seconds()
	res["cpu_seconds"] = cpu.Seconds()
	res["fetch_to_durable_p50_ms"] = p50 * 1000
	res["fetch_to_durable_p99_ms"] = p99 * 1000
	res["rss_peak_bytes"] = peak
	res["rss_consuming_min_bytes"] = lo
	res["rss_consuming_max_bytes"] = hi
	res["rss_samples"] = rssSeries(samples, 12)
	fmt.Printf("kafka:   %d records in %.2fs = %.0f records/s broker to durable ledger entries (%d partitions, %d-byte values); first entry after %.0f ms; between 10%% and 90%%: %.0f records/s\n",
		total, elapsed.Seconds(), rate, f.partitions, f.valueBytes, ms(first), steady)
	fmt.Printf("cpu:     %.1f s of CPU for the consuming phase (%.1f cores of %d; broker, client and ledger share the process)\n",
		cpu.Seconds(), cpu.Seconds()/elapsed.Seconds(), runtime.NumCPU())
	commitP50, commitP99 := histQuantile(reg, "ledger_commit_duration_seconds", .5), histQuantile(reg, "ledger_commit_duration_seconds", .99)
	appendP50, appendP99 := histQuantile(reg, "ledger_append_duration_seconds", .5), histQuantile(reg, "ledger_append_duration_seconds", .99)
	batchP50 := histQuantile(reg, "ledger_commit_batch_entries", .5)
	res["ledger_commit_p50_ms"], res["ledger_commit_p99_ms"] = commitP50*1000, commitP99*1000
	res["ledger_append_p50_ms"], res["ledger_append_p99_ms"] = appendP50*1000, appendP99*1000
	res["ledger_commit_entries_p50"] = batchP50
	fmt.Printf("ledger:  one group commit (write and sync) p50 %.0f ms p99 %.0f ms, ~%.0f entries; a request's wait in the ledger p50 %.0f ms p99 %.0f ms\n",
		commitP50*1000, commitP99*1000, batchP50, appendP50*1000, appendP99*1000)
	fmt.Printf("latency: poll to durable (per partition batch, Prometheus buckets of x2, interpolated): p50 %.0f ms  p99 %.0f ms; a backlog run measures mostly queueing\n", p50*1000, p99*1000)
	fmt.Printf("memory:  peak RSS (VmHWM) %s, of which the broker ~%s; RSS while consuming %s .. %s (%s above the filled broker at most)\n",
		mib(peak), mib(rssFilled-rssStart), mib(lo), mib(hi), mib(hi-rssFilled))
	fmt.Printf("memory:  over the run (time:entries:RSS/Go heap): %s\n", strings.Join(rssSeries(samples, 12), " "))
	fmt.Printf("memory:  the broker's records are live Go heap here, and the GC lets the heap grow to about twice its live size\n" +
		"         (GOGC=100): the growth above the broker overstates the source's own memory; -daemon measures auditd serve alone\n")
	res["load_average_end"] = loadAvg()
	fmt.Printf("bench: load average %s at the end (other processes share the CPUs)\n", res["load_average_end"])
	return res, nil
}

// fillBenchTopic produces f.records records, keyed by account, each with a
// unique id header and a JSON value of f.valueBytes bytes, and returns the
// partitions' high watermarks.
func fillBenchTopic(ctx context.Context, broker string, f benchKafkaFlags, codec kgo.CompressionCodec) ([]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("bench"),
		kgo.ProducerBatchCompression(codec), kgo.MaxBufferedRecords(200_000), kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	var acked atomic.Int64
	const producers = 2
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := newEventGen(uint64(p)+11, f.valueBytes, false)
			rng := rand.New(rand.NewPCG(uint64(p), 3))
			pad := make([]byte, 4096)
			for i := range pad {
				pad[i] = alnum[rng.IntN(len(alnum))]
			}
			for i := p; i < f.records && failed.Load() == nil; i += producers {
				acct := rng.IntN(100_000)
				v := make([]byte, 0, f.valueBytes)
				v = append(v, `{"account":"acct-`...)
				v = strconv.AppendInt(v, int64(acct), 10)
				v = append(v, `","amount":`...)
				v = strconv.AppendInt(v, int64(rng.IntN(1_000_000)), 10)
				v = append(v, `,"seq":`...)
				v = strconv.AppendInt(v, int64(i), 10)
				v = append(v, `,"pad":"`...)
				n := max(0, f.valueBytes-len(v)-2)
				off := rng.IntN(len(pad) - min(n, len(pad)-1))
				for n > 0 {
					c := min(n, len(pad)-off)
					v = append(v, pad[off:off+c]...)
					n -= c
					off = 0
				}
				v = append(v, '"', '}')
				r := &kgo.Record{Key: []byte("acct-" + strconv.Itoa(acct)), Value: v,
					Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(g.id())}}}
				cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.CompareAndSwap(nil, &err)
					}
					acked.Add(1)
				})
			}
		}()
	}
	progressDone := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "produce: %d/%d\n", acked.Load(), f.records)
			}
		}
	}()
	wg.Wait()
	err = cl.Flush(ctx)
	close(progressDone)
	if p := failed.Load(); p != nil {
		return nil, fmt.Errorf("bench kafka: produce: %w", *p)
	}
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "bench")
	if err != nil {
		return nil, err
	}
	hwm := make([]int64, f.partitions)
	ends.Each(func(o kadm.ListedOffset) { hwm[o.Partition] = o.Offset })
	return hwm, nil
}

// benchFetchOnly reads the topic with a Kafka client configured as the
// source's, counting records and doing nothing else: the rate the broker
// and the client alone reach.
func benchFetchOnly(ctx context.Context, broker string, total int64, f benchKafkaFlags, res map[string]any) (map[string]any, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("bench"), kgo.ConsumerGroup("auditd-bench-fetch"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<20), kgo.MaxConcurrentFetches(4), kgo.DisableAutoCommit())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := cpuTime()
	start := time.Now()
	var n, bytes int64
	for n < total {
		fs := cl.PollRecords(ctx, 16384)
		if err := fs.Err0(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) { n++; bytes += int64(len(r.Value) + len(r.Key)) })
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	res["fetch_only"] = true
	res["seconds"] = elapsed.Seconds()
	res["records_per_second"] = float64(n) / elapsed.Seconds()
	res["cpu_seconds"] = cpu.Seconds()
	res["rss_peak_bytes"] = procStatusKB("VmHWM")
	fmt.Printf("fetch:   %d records (%s of keys and values) in %.2fs = %.0f records/s from the broker to a client, no ledger; %.1f s of CPU\n",
		n, mib(bytes), elapsed.Seconds(), float64(n)/elapsed.Seconds(), cpu.Seconds())
	return res, nil
}

var servingLine = regexp.MustCompile(`msg="auditd serving".* addr=(http://[0-9.:]+)`)

// benchKafkaDaemon consumes the topic with "auditd serve" in a child
// process, polling its API until every log is complete, and reports the
// child's rate, CPU and memory: the daemon's own, without the broker's.
func benchKafkaDaemon(ctx context.Context, broker string, total int64, f benchKafkaFlags, res map[string]any) (map[string]any, error) {
	dir, cleanup, err := benchDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--log-format", "text",
		"--kafka-brokers", broker, "--kafka-topics", "bench", "--kafka-group", "auditd-bench"}
	if f.batch > 0 {
		cfg := dir + "/bench.yaml"
		if err := os.WriteFile(cfg, fmt.Appendf(nil, "kafka:\n  batch_records: %d\n", f.batch), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--config", cfg)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	fmt.Printf("bench: consuming with %s %s ...\n", exe, strings.Join(args, " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer cmd.Process.Kill()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	var url string
	select {
	case url = <-addr:
	case <-time.After(30 * time.Second):
		return nil, errors.New("bench kafka: the daemon did not serve within 30s")
	}
	pid := cmd.Process.Pid
	var samples []rssSample
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	for {
		<-tick.C
		var logs []struct {
			Size int64 `json:"size"`
		}
		b, err := httpGet(ctx, url+"/v1/logs")
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &logs); err != nil {
			return nil, err
		}
		var n int64
		for _, l := range logs {
			n += l.Size
		}
		now := time.Since(start)
		samples = append(samples, rssSample{at: now, entries: n, rss: pidStatusKB(pid, "VmRSS")})
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "kafka: %d/%d (%.0f%%), %.0f/s, daemon RSS %s\n", n, total, 100*float64(n)/float64(total), float64(n)/now.Seconds(), mib(samples[len(samples)-1].rss))
		}
		if n >= total {
			break
		}
	}
	elapsed := time.Since(start)
	peak := pidStatusKB(pid, "VmHWM")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("bench kafka: the daemon: %w", err)
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	lo, hi := rssRange(samples)
	rate := float64(total) / elapsed.Seconds()
	res["daemon"] = true
	res["seconds"] = elapsed.Seconds()
	res["records_per_second"] = rate
	res["steady_records_per_second"] = steadyRate(samples, total)
	res["cpu_seconds"] = cpu.Seconds()
	res["rss_peak_bytes"] = peak
	res["rss_consuming_min_bytes"], res["rss_consuming_max_bytes"] = lo, hi
	res["rss_samples"] = rssSeries(samples, 12)
	fmt.Printf("kafka:   %d records in %.2fs = %.0f records/s broker to durable ledger entries by auditd serve (from its exec; 250 ms polling); between 10%% and 90%%: %.0f records/s\n",
		total, elapsed.Seconds(), rate, res["steady_records_per_second"])
	fmt.Printf("cpu:     the daemon used %.1f s of CPU (%.1f cores of %d); the broker ran in this process\n", cpu.Seconds(), cpu.Seconds()/elapsed.Seconds(), runtime.NumCPU())
	fmt.Printf("memory:  the daemon's peak RSS (VmHWM) %s; RSS while consuming %s .. %s\n", mib(peak), mib(lo), mib(hi))
	fmt.Printf("memory:  over the run (time:entries:RSS): %s\n", strings.Join(rssSeries(samples, 12), " "))
	return res, nil
}

// pidStatusKB is procStatusKB for another process.
func pidStatusKB(pid int, field string) int64 {
	return statusKB("/proc/"+strconv.Itoa(pid)+"/status", field)
}

type rssSample struct {
	at      time.Duration
	entries int64
	rss     int64
	heap    int64 // Go heap objects, live and not yet swept
}

// heapBytes reads the Go heap's object bytes without stopping the world.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// steadyRate is the rate between 10% and 90% of the records, leaving out
// the group join and the tail.
func steadyRate(s []rssSample, total int64) float64 {
	var a, b *rssSample
	for i := range s {
		if a == nil && s[i].entries >= total/10 {
			a = &s[i]
		}
		if b == nil && s[i].entries >= total*9/10 {
			b = &s[i]
		}
	}
	if a == nil || b == nil || b.at <= a.at {
		return 0
	}
	return float64(b.entries-a.entries) / (b.at - a.at).Seconds()
}

func rssRange(s []rssSample) (lo, hi int64) {
	lo = math.MaxInt64
	for _, x := range s {
		lo, hi = min(lo, x.rss), max(hi, x.rss)
	}
	return lo, hi
}

// rssSeries picks about n samples, evenly spaced, as "time entries
// RSS/heap" strings.
func rssSeries(s []rssSample, n int) []string {
	var out []string
	step := max(1, len(s)/n)
	f := func(x rssSample) string {
		if x.heap == 0 {
			return fmt.Sprintf("%.0fs:%dk:%.0fMiB", x.at.Seconds(), x.entries/1000, float64(x.rss)/(1<<20))
		}
		return fmt.Sprintf("%.0fs:%dk:%.0f/%.0fMiB", x.at.Seconds(), x.entries/1000, float64(x.rss)/(1<<20), float64(x.heap)/(1<<20))
	}
	for i := 0; i < len(s); i += step {
		out = append(out, f(s[i]))
	}
	if (len(s)-1)%step != 0 {
		out = append(out, f(s[len(s)-1]))
	}
	return out
}

// procStatusKB reads a "kB" field of /proc/self/status, in bytes (0 where
// there is no /proc).
func procStatusKB(field string) int64 { return statusKB("/proc/self/status", field) }

func statusKB(path, field string) int64 {
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

// loadAvg is the 1, 5 and 15 minute load averages, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// histQuantile estimates quantile q of a histogram in reg the way
// Prometheus's histogram_quantile does: linearly within the bucket.
func histQuantile(reg *prometheus.Registry, name string, q float64) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return math.NaN()
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		return bucketQuantile(h, q)
	}
	return math.NaN()
}

func bucketQuantile(h *dto.Histogram, q float64) float64 {
	n := float64(h.GetSampleCount())
	if n == 0 {
		return math.NaN()
	}
	bs := h.GetBucket()
	sort.Slice(bs, func(i, j int) bool { return bs[i].GetUpperBound() < bs[j].GetUpperBound() })
	rank := q * n
	lower, prev := 0.0, 0.0
	for _, b := range bs {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == prev {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-prev)/(c-prev)
		}
		lower, prev = b.GetUpperBound(), c
	}
	return lower // beyond the last bucket: its bound, as Prometheus does
}

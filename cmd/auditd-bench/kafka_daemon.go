package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/internal/loadtest"
)

// benchFetchOnly reads the topic with a Kafka client configured as the
// source's, counting records and doing nothing else: the rate the broker
// and the client alone reach.
func benchFetchOnly(ctx context.Context, broker string, total int64, f kafkaFlags, res map[string]any) (map[string]any, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("bench"), kgo.ConsumerGroup("auditd-bench-fetch"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<20), kgo.MaxConcurrentFetches(4), kgo.DisableAutoCommit())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	cpu0 := loadtest.CPUTime()
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
	cpu := loadtest.CPUTime() - cpu0
	res["fetch_only"] = true
	res["seconds"] = elapsed.Seconds()
	res["records_per_second"] = float64(n) / elapsed.Seconds()
	res["cpu_seconds"] = cpu.Seconds()
	res["rss_peak_bytes"] = loadtest.SelfStatusKB("VmHWM")
	fmt.Printf("fetch:   %d records (%s of keys and values) in %.2fs = %.0f records/s from the broker to a client, no ledger; %.1f s of CPU\n",
		n, loadtest.MiB(bytes), elapsed.Seconds(), float64(n)/elapsed.Seconds(), cpu.Seconds())
	return res, nil
}

// auditdBinary is the auditd binary -daemon runs: -auditd, else auditd
// beside this executable, else auditd on $PATH.
func auditdBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "auditd")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("auditd"); err == nil {
		return p, nil
	}
	return "", usageError{errors.New("kafka -daemon: no auditd binary beside this one or on $PATH: go build -o /tmp/auditd ./cmd/auditd and pass -auditd /tmp/auditd")}
}

var (
	servingLine = regexp.MustCompile(`msg="auditd serving".* addr=(http://[0-9.:]+)`)
	debugLine   = regexp.MustCompile(`msg="serving Go profiles".* addr=(http://[0-9.:]+)`)
)

// startDaemon starts "auditd serve" consuming the topic into dir and
// returns it with the URL it serves on. With -cpuprofile the daemon also
// serves Go profiles; debug receives that listener's URL.
func startDaemon(ctx context.Context, broker, dir string, f kafkaFlags) (cmd *exec.Cmd, url string, debug <-chan string, err error) {
	exe, err := auditdBinary(f.auditd)
	if err != nil {
		return nil, "", nil, err
	}
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--log-format", "text",
		"--kafka-brokers", broker, "--kafka-topics", "bench", "--kafka-group", "auditd-bench"}
	if f.cpuProfile != "" {
		args = append(args, "--debug-listen", "127.0.0.1:0")
	}
	if f.batch > 0 {
		cfg := dir + "/bench.yaml"
		if err := os.WriteFile(cfg, fmt.Appendf(nil, "kafka:\n  batch_records: %d\n", f.batch), 0o600); err != nil {
			return nil, "", nil, err
		}
		args = append(args, "--config", cfg)
	}
	cmd = exec.CommandContext(ctx, exe, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", nil, err
	}
	fmt.Printf("bench: consuming with %s %s ...\n", exe, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return nil, "", nil, err
	}
	addr, dbg := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			for re, ch := range map[*regexp.Regexp]chan string{servingLine: addr, debugLine: dbg} {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case ch <- m[1]:
					default:
					}
				}
			}
		}
	}()
	select {
	case url := <-addr:
		return cmd, url, dbg, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, "", nil, errors.New("kafka: the daemon did not serve within 30s")
	}
}

// benchKafkaDaemon consumes the topic with "auditd serve" in a child
// process, polling its API until every log is complete, and reports the
// child's rate, CPU and memory: the daemon's own, without the broker's.
func benchKafkaDaemon(ctx context.Context, broker string, total int64, f kafkaFlags, res map[string]any) (map[string]any, error) {
	dir, cleanup, err := loadtest.DataDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	start := time.Now()
	cmd, url, debug, err := startDaemon(ctx, broker, dir, f)
	if err != nil {
		return nil, err
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	profiled := daemonProfile(ctx, debug, f)
	samples, err := pollDaemon(ctx, url, pid, total, start)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	peak := loadtest.PidStatusKB(pid, "VmHWM")
	if err := <-profiled; err != nil {
		fmt.Fprintf(os.Stderr, "bench: the daemon's CPU profile: %v\n", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("kafka: the daemon: %w", err)
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
	res["cpu_us_per_record"] = cpu.Seconds() * 1e6 / float64(total)
	res["rss_median_bytes"] = rssMedian(samples)
	res["load_average_end"] = loadtest.LoadAvg(3)
	mib := loadtest.MiB
	fmt.Printf("kafka:   %d records in %.2fs = %.0f records/s broker to durable ledger entries by auditd serve (from its exec; 250 ms polling); between 10%% and 90%%: %.0f records/s\n",
		total, elapsed.Seconds(), rate, res["steady_records_per_second"])
	fmt.Printf("cpu:     the daemon used %.1f s of CPU (%.1f cores of %d), %.2f us per record; the broker ran in this process\n",
		cpu.Seconds(), cpu.Seconds()/elapsed.Seconds(), runtime.NumCPU(), res["cpu_us_per_record"])
	fmt.Printf("memory:  the daemon's peak RSS (VmHWM) %s; RSS while consuming %s .. %s, median %s (sampled every 250 ms)\n", mib(peak), mib(lo), mib(hi), mib(rssMedian(samples)))
	fmt.Printf("memory:  over the run (time:entries:RSS): %s\n", strings.Join(rssSeries(samples, 12), " "))
	fmt.Printf("bench: load average %s at the end\n", res["load_average_end"])
	return res, nil
}

// pollDaemon polls the daemon's logs every 250 ms until they hold total
// entries, sampling its resident set.
func pollDaemon(ctx context.Context, url string, pid int, total int64, start time.Time) ([]rssSample, error) {
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
		samples = append(samples, rssSample{at: now, entries: n, rss: loadtest.PidStatusKB(pid, "VmRSS")})
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "kafka: %d/%d (%.0f%%), %.0f/s, daemon RSS %s\n", n, total, 100*float64(n)/float64(total), float64(n)/now.Seconds(), loadtest.MiB(samples[len(samples)-1].rss))
		}
		if n >= total {
			return samples, nil
		}
	}
}

type rssSample struct {
	at      time.Duration
	entries int64
	rss     int64
	heap    int64 // Go heap objects, live and not yet swept
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

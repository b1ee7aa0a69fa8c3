package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
)

// logsFlags are the flags of the logs mode.
type logsFlags struct {
	auditd      string
	dir         string
	counts      string
	concurrency int
	jsonOut     string
}

// runLogs is the logs mode: the memory an "auditd serve" child takes for
// many logs of one event each, and the time it takes to start again with
// them.
func runLogs(args []string) error {
	f := logsFlags{}
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.StringVar(&f.auditd, "auditd", "", "auditd binary to run (default: auditd beside this binary, else on $PATH)")
	fs.StringVar(&f.dir, "data-dir", "", "data directory of the child (default: a temporary one, removed after)")
	fs.StringVar(&f.counts, "counts", "1000,10000", "logs to have after each step, comma-separated, increasing: RSS is read after each")
	fs.IntVar(&f.concurrency, "concurrency", 16, "concurrent POSTs")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: auditd-bench logs [flags]

Starts "auditd serve" on a loopback port (--max-logs above the last count),
POSTs one event to each of many new logs, and reads the child's VmRSS before
and after each step; then stops it (SIGTERM), starts it again on the same
data, and reports the time until /readyz answers 200 and the RSS then.

`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return done(err)
	}
	var counts []int
	for _, c := range strings.Split(f.counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || (len(counts) > 0 && n <= counts[len(counts)-1]) {
			return usageError{fmt.Errorf("-counts %q: want increasing positive numbers, comma-separated", f.counts)}
		}
		counts = append(counts, n)
	}
	if f.concurrency < 1 {
		return usageError{errors.New("-concurrency must be positive")}
	}
	exe, err := auditdBinary(f.auditd)
	if err != nil {
		return err
	}
	dir, cleanup, err := loadtest.DataDir(f.dir)
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()
	maxLogs := counts[len(counts)-1] + 1
	res := map[string]any{"counts": counts}

	cmd, url, err := startServe(ctx, exe, dir, maxLogs)
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	rss := loadtest.PidStatusKB(pid, "VmRSS")
	res["rss_start_bytes"] = rss
	fmt.Printf("logs: auditd pid %d serving %s; RSS %s\n", pid, url, loadtest.MiB(rss))
	have := 0
	for _, n := range counts {
		t0 := time.Now()
		if err := postOneEach(ctx, url, have, n, f.concurrency); err != nil {
			stopServe(cmd)
			return err
		}
		took := time.Since(t0)
		have = n
		rss := loadtest.PidStatusKB(pid, "VmRSS")
		res[fmt.Sprintf("rss_after_%d_bytes", n)] = rss
		fmt.Printf("logs: %d one-event logs (%.1fs to create); RSS %s\n", n, took.Seconds(), loadtest.MiB(rss))
	}
	if err := stopServe(cmd); err != nil {
		return err
	}

	t0 := time.Now()
	cmd, url, err = startServe(ctx, exe, dir, maxLogs)
	if err != nil {
		return err
	}
	defer stopServe(cmd)
	if err := waitReady(ctx, url, 10*time.Minute); err != nil {
		return err
	}
	restart := time.Since(t0)
	rss = loadtest.PidStatusKB(cmd.Process.Pid, "VmRSS")
	res["restart_seconds"], res["rss_after_restart_bytes"] = restart.Seconds(), rss
	fmt.Printf("logs: restart with %d logs ready in %.2fs; RSS %s\n", have, restart.Seconds(), loadtest.MiB(rss))
	return writeJSON(f.jsonOut, "logs", res)
}

// startServe starts "auditd serve" on dir and returns it with its URL.
func startServe(ctx context.Context, exe, dir string, maxLogs int) (*exec.Cmd, string, error) {
	args := []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--log-format", "text", "--max-logs", strconv.Itoa(maxLogs)}
	cmd := exec.CommandContext(ctx, exe, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
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
	select {
	case url := <-addr:
		return cmd, url, nil
	case <-time.After(10 * time.Minute):
		cmd.Process.Kill()
		return nil, "", errors.New("logs: auditd did not serve within 10 minutes")
	}
}

func stopServe(cmd *exec.Cmd) error {
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("auditd serve: %w", err)
	}
	return nil
}

func waitReady(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s/readyz not 200 within %s", url, within)
}

// postOneEach POSTs one event to each of the logs from and up to to.
func postOneEach(ctx context.Context, url string, from, to, concurrency int) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				body := fmt.Appendf(nil, `{"id":"e-%d","payload":{"n":%d}}`+"\n", i, i)
				if _, err := postBatch(ctx, fmt.Sprintf("%s/v1/logs/log-%06d/entries", url, i), body); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(to))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
)

// The soak's limits, passed to the daemon; the bounds it asserts follow.
const (
	soakBodyTimeout = 2 * time.Second
	soakMaxBody     = 4 << 20
	soakInflight    = 16 << 20
	soakCache       = 16 << 20
	// soakRSSBound is the daemon's peak RSS allowed: about 150 MiB of
	// Pebble memtables, cache and runtime, plus 2.5 bytes per byte of the
	// body budget (docs/operations.md, "Limits and hardening").
	soakRSSBound = 150<<20 + soakInflight*5/2
	// soakCommitAllowance is "one commit" on this shared, loaded machine.
	soakCommitAllowance = 5 * time.Second
)

// TestSoak runs a real daemon (loopback only) under concurrent writers,
// slow-body clients, large bodies and readers for AUDITD_SOAK_DURATION
// (default 10s; CI runs 2m in its own step), then checks that the
// daemon's peak RSS stayed under soakRSSBound, that every acknowledged
// event is in its log exactly once, and that no acknowledged write waited
// longer than the body timeout plus one commit.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: skipped with -short")
	}
	dur := 10 * time.Second
	if v := os.Getenv("AUDITD_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("AUDITD_SOAK_DURATION: %v", err)
		}
		dur = d
	}
	ctx := context.Background()
	bin := buildDaemon(t, ctx)
	d, err := startDaemonArgs(ctx, bin, 0, "serve", "--data-dir", t.TempDir()+"/data", "--listen", "127.0.0.1:0",
		"--checkpoint-interval", "50ms", "--log-format", "text", "--cache-bytes", fmt.Sprint(soakCache),
		"--max-body-bytes", fmt.Sprint(soakMaxBody), "--max-inflight-bytes", fmt.Sprint(soakInflight),
		"--body-timeout", soakBodyTimeout.String(),
		// No scrub: its first pass starts at a random moment, which would
		// make the RSS bound depend on chance. The scrub's memory is bounded
		// by ledger.TestRawLogScanBoundsBatchBytes.
		"--scrub-interval", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.kill()
	addr := strings.TrimPrefix(d.url, "http://")
	pid := d.cmd.Process.Pid

	var (
		mu       sync.Mutex
		acked    = map[string]map[string]int{} // log -> id -> acks
		maxWait  time.Duration
		writes   atomic.Int64
		refused  atomic.Int64 // 408s and 503s of well-behaved writers (none expected)
		timeouts atomic.Int64 // 408s of the slow clients (all expected)
		reads    atomic.Int64
		peakRSS  atomic.Int64
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: time.Minute}
	postBatch := func(log string, ids []string, payload string) {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, `{"id":%q,"payload":%s}`+"\n", id, payload)
		}
		start := time.Now()
		resp, err := client.Post(d.url+"/v1/logs/"+log+"/entries", "application/x-ndjson", strings.NewReader(b.String()))
		if err != nil {
			t.Errorf("POST %s: %v", log, err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		waited := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			refused.Add(1)
			t.Errorf("POST %s: %d %s", log, resp.StatusCode, body)
			return
		}
		var out struct {
			Entries []struct{ ID string } `json:"entries"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Entries) != len(ids) {
			t.Errorf("POST %s: %d entries acknowledged of %d (%v)", log, len(out.Entries), len(ids), err)
			return
		}
		writes.Add(1)
		mu.Lock()
		defer mu.Unlock()
		maxWait = max(maxWait, waited)
		if acked[log] == nil {
			acked[log] = map[string]int{}
		}
		for _, e := range out.Entries {
			acked[log][e.ID]++
		}
	}

	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	run := func(n int, f func(worker, round int)) {
		for w := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := 0; time.Now().Before(deadline) && !t.Failed(); round++ {
					f(w, round)
				}
			}()
		}
	}
	small := `{"amount":1,"note":"soak"}`
	run(6, func(w, round int) { // writers: 50 small events a request
		ids := make([]string, 50)
		for i := range ids {
			ids[i] = fmt.Sprintf("w%d-r%d-%d", w, round, i)
		}
		postBatch(fmt.Sprintf("soak-%d", w%3), ids, small)
	})
	big := `"` + strings.Repeat("b", 100<<10) + `"`
	run(2, func(w, round int) { // large bodies: 30 x 100 KiB, about 3 MiB
		ids := make([]string, 30)
		for i := range ids {
			ids[i] = fmt.Sprintf("big%d-r%d-%d", w, round, i)
		}
		postBatch("soak-big", ids, big)
		time.Sleep(100 * time.Millisecond)
	})
	// Slow bodies, as many as there are write slots (16 by default): one
	// byte every 500ms, never done in time.
	run(16, func(w, round int) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/logs/soak-slow/entries HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
		br := bufio.NewReader(c)
		got := make(chan int, 1)
		go func() {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				got <- 0
				return
			}
			res.Body.Close()
			got <- res.StatusCode
		}()
		giveUp := time.After(soakBodyTimeout + soakCommitAllowance)
		for {
			select {
			case code := <-got:
				if code != http.StatusRequestTimeout {
					t.Errorf("slow body: answered %d, want 408", code)
				}
				timeouts.Add(1)
				return
			case <-time.After(500 * time.Millisecond):
				c.Write([]byte(" "))
			case <-giveUp:
				t.Errorf("slow body: no answer in %v", soakBodyTimeout+soakCommitAllowance)
				return
			}
		}
	})
	run(2, func(w, round int) { // readers
		for _, p := range []string{"/v1/logs", "/v1/logs/soak-0/checkpoint", "/v1/logs/soak-1/entries?start=0&end=100"} {
			code, _, err := d.get(ctx, p)
			if err != nil || (code != http.StatusOK && code != http.StatusNotFound) {
				t.Errorf("GET %s: %d %v", p, code, err)
			}
			reads.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
	})
	wg.Add(1)
	go func() { // RSS sampler
		defer wg.Done()
		for time.Now().Before(deadline.Add(soakBodyTimeout)) {
			peakRSS.Store(max(peakRSS.Load(), loadtest.PidStatusKB(pid, "VmRSS")))
			time.Sleep(200 * time.Millisecond)
		}
	}()
	wg.Wait()
	hwm := max(loadtest.PidStatusKB(pid, "VmHWM"), peakRSS.Load())
	t.Logf("soak %v: %d acknowledged writes, %d slow bodies timed out (408), %d reads; longest acknowledged write %v; peak RSS %d MiB (bound %d MiB)",
		dur, writes.Load(), timeouts.Load(), reads.Load(), maxWait.Round(time.Millisecond), hwm>>20, soakRSSBound>>20)
	if hwm > soakRSSBound {
		t.Errorf("peak RSS %d MiB over the bound %d MiB", hwm>>20, soakRSSBound>>20)
	}
	if maxWait > soakBodyTimeout+soakCommitAllowance {
		t.Errorf("a write waited %v, more than the body timeout %v plus one commit (%v)", maxWait, soakBodyTimeout, soakCommitAllowance)
	}
	if writes.Load() == 0 || timeouts.Load() == 0 {
		t.Fatalf("the soak did not load the daemon: %d writes, %d slow bodies", writes.Load(), timeouts.Load())
	}
	// Every acknowledged event is in its log exactly once.
	for log, ids := range acked {
		seen := map[string]int{}
		page := uint64(5000)
		if log == "soak-big" {
			page = 20
		}
		for start := uint64(0); ; start += page {
			var out struct {
				Entries []struct{ ID string } `json:"entries"`
			}
			code, body, err := d.get(ctx, fmt.Sprintf("/v1/logs/%s/entries?start=%d&end=%d", log, start, start+page))
			if code == http.StatusBadRequest {
				break // past the end
			}
			if err != nil || code != http.StatusOK || json.Unmarshal(body, &out) != nil {
				t.Fatalf("GET %s entries from %d: %d %v", log, start, code, err)
			}
			for _, e := range out.Entries {
				seen[e.ID]++
			}
			if uint64(len(out.Entries)) < page {
				break
			}
		}
		for id, n := range ids {
			if n != 1 || seen[id] != 1 {
				t.Errorf("%s: id %s acknowledged %d times, held %d times", log, id, n, seen[id])
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s: id %s held %d times", log, id, n)
			}
		}
	}
	if err := d.stop(ctx); err != nil {
		t.Errorf("stop: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
}

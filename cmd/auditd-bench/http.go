package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/merkle"
)

// runHTTP is the http mode: HTTP ingestion, with the time from each POST
// to the signed checkpoint covering it.
func runHTTP(args []string) error {
	f, err := parseBenchFlags("http", args)
	if err != nil {
		return done(err)
	}
	ctx := context.Background()
	res, err := withServer(ctx, &f, func() (map[string]any, error) { return benchHTTP(ctx, f) })
	if err != nil {
		return err
	}
	return writeJSON(f.jsonOut, f.mode, res)
}

var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}

// ndjsonBodies prebuilds request bodies so the client spends little CPU
// during the run.
func ndjsonBodies(f benchFlags, n int, seed uint64) [][]byte {
	gen := loadtest.NewEventGen(seed, f.payload, f.random)
	bodies := make([][]byte, n)
	for i := range bodies {
		var buf bytes.Buffer
		for range f.batch {
			pl, isJSON := gen.Payload()
			if isJSON {
				fmt.Fprintf(&buf, `{"id":%q,"payload":%s}`+"\n", gen.ID(), pl)
			} else {
				b, _ := json.Marshal(pl)
				fmt.Fprintf(&buf, `{"id":%q,"payload_base64":%s}`+"\n", gen.ID(), b)
			}
		}
		bodies[i] = buf.Bytes()
	}
	return bodies
}

func benchHTTP(ctx context.Context, f benchFlags) (map[string]any, error) {
	v, err := fetchVerifier(ctx, f.server)
	if err != nil {
		return nil, err
	}
	reqs := (f.events + f.batch - 1) / f.batch
	// Ids must be unique, so each body is sent once.
	fmt.Printf("bench: building %d request bodies ...\n", reqs)
	bodies := ndjsonBodies(f, reqs, 7)
	var tracker loadtest.CheckpointTracker
	var appendLat loadtest.Latencies
	pctx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pollCheckpoints(pctx, f.server, f.log, v, &tracker)
	}()
	url := f.server + "/v1/logs/" + f.log + "/entries"
	scrub := startScrubMeter(ctx, f.server)
	elapsed, err := loadtest.Drive("http", f.producers, reqs, int64(f.batch), func(_, r int) error {
		t0 := time.Now()
		size, err := postBatch(ctx, url, bodies[r])
		if err != nil {
			return err
		}
		appendLat.Add(time.Since(t0))
		tracker.Acked(size, t0)
		return nil
	})
	if err != nil {
		stopPoll()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for tracker.Waiting() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stopPoll()
	<-polled
	n := reqs * f.batch
	ms, cpLat := loadtest.MS, tracker.Latencies()
	res := map[string]any{
		"events": n, "seconds": elapsed.Seconds(), "events_per_second": float64(n) / elapsed.Seconds(),
		"append_p50_ms": ms(appendLat.Pct(.5)), "append_p99_ms": ms(appendLat.Pct(.99)),
		"checkpoint_p50_ms": ms(cpLat.Pct(.5)), "checkpoint_p99_ms": ms(cpLat.Pct(.99)),
		"producers": f.producers, "batch": f.batch, "payload_bytes": f.payload,
	}
	fmt.Printf("http: %d events in %.2fs = %.0f events/s (%d concurrent requests of %d events, %d-byte payloads)\n",
		n, elapsed.Seconds(), res["events_per_second"], f.producers, f.batch, f.payload)
	scrub.report(ctx, elapsed, n, res)
	fmt.Printf("POST latency (to durable ack):        p50 %.1f ms  p99 %.1f ms\n", res["append_p50_ms"], res["append_p99_ms"])
	fmt.Printf("append to covering signed checkpoint: p50 %.1f ms  p99 %.1f ms (checkpoint polled every 2 ms)\n", res["checkpoint_p50_ms"], res["checkpoint_p99_ms"])
	return res, nil
}

func postBatch(ctx context.Context, url string, body []byte) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if t := os.Getenv("AUDITD_WRITE_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	var out struct {
		Size uint64 `json:"size"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, err
	}
	return out.Size, nil
}

func fetchVerifier(ctx context.Context, server string) (note.Verifier, error) {
	b, err := httpGet(ctx, server+"/v1/verifier")
	if err != nil {
		return nil, err
	}
	return note.NewVerifier(strings.TrimSpace(string(b)))
}

// httpGet GETs url with the read token of $AUDITD_READ_TOKEN, if set.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if t := os.Getenv("AUDITD_READ_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, nil
}

// pollCheckpoints fetches the log's checkpoint every 2 ms, verifies it and
// reports each new size to t.
func pollCheckpoints(ctx context.Context, server, log string, v note.Verifier, t *loadtest.CheckpointTracker) {
	origin := v.Name() + "/" + log
	var last uint64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b, err := httpGet(ctx, server+"/v1/logs/"+log+"/checkpoint")
		if err != nil {
			continue
		}
		now := time.Now()
		cp, err := merkle.OpenCheckpoint(b, v, origin)
		if err != nil || cp.Size <= last {
			continue
		}
		last = cp.Size
		t.Checkpoint(cp.Size, now)
	}
}

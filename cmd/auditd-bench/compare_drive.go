package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
)

// roundResult is one target's figures in one round.
type roundResult struct {
	Target       string  `json:"target"`
	Round        int     `json:"round"`
	Requests     int64   `json:"requests"`
	Events       int64   `json:"events"`
	Seconds      float64 `json:"seconds"`
	WritesPerSec float64 `json:"writes_per_second"`
	EventsPerSec float64 `json:"events_per_second"`
	ServerCPU    float64 `json:"server_cpu_seconds"`
	ServerCores  float64 `json:"server_cores"`
	// RunqWaitMS is the time the server's threads waited, runnable, for a
	// CPU, per second of the window: how much the machine's other load
	// (this generator included) held it back.
	RunqWaitMS    float64 `json:"server_runq_wait_ms_per_second"`
	CPUPerEventUS float64 `json:"server_cpu_us_per_event"`
	ClientCPU     float64 `json:"client_cpu_seconds"`
	AckP50        float64 `json:"ack_p50_ms"`
	AckP99        float64 `json:"ack_p99_ms"`
	CheckpointP50 float64 `json:"checkpoint_p50_ms,omitempty"`
	CheckpointP99 float64 `json:"checkpoint_p99_ms,omitempty"`
	// FromAckP50 and FromAckP99 time each ack to the first checkpoint
	// covering it (per add, not a difference of medians).
	FromAckP50 float64 `json:"ack_to_checkpoint_p50_ms,omitempty"`
	FromAckP99 float64 `json:"ack_to_checkpoint_p99_ms,omitempty"`
	Uncovered  int     `json:"uncovered_acks,omitempty"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Load1      string  `json:"load1"`
}

// Phases of a round's load.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// runRound starts t fresh, loads it for the warmup and the measured
// window, waits for the checkpoints covering the window's acks and stops
// it. With profile set it saves a CPU profile of the window there.
func runRound(ctx context.Context, t *target, f compareFlags, round int, tmp, profile string) (roundResult, error) {
	res := roundResult{Target: t.spec.label, Round: round}
	dir := relDir(tmp, t.spec.label, round)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := t.start(ctx, dir, profile != "")
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.child.Stop()
		}
	}()
	bodies, err := loadtest.NewSaltedBodies(uint64(round), f.payload, 1024)
	if err != nil {
		return res, err
	}
	if err := drive(ctx, srv, f, bodies, profile, &res); err != nil {
		return res, err
	}
	stopped = true
	if err := srv.child.Stop(); err != nil {
		return res, err
	}
	res.Load1 = loadtest.LoadAvg(1)
	return res, nil
}

// load is the shared state of a round's workers.
type load struct {
	srv      *running
	client   poster
	bodies   *loadtest.Bodies
	batch    int
	phase    atomic.Int32
	next     atomic.Uint64
	requests atomic.Int64
	errors   atomic.Int64
	firstErr atomic.Value // string
	ack      loadtest.Latencies
	tracker  loadtest.CheckpointTracker
}

// drive runs the round's load on srv and fills res.
func drive(ctx context.Context, srv *running, f compareFlags, bodies *loadtest.Bodies, profile string, res *roundResult) error {
	client := newPoster(f.client, srv.postURL, srv.contentType, f.concurrency)
	defer client.close()
	ld := &load{srv: srv, client: client, bodies: bodies, batch: f.batch}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var polled sync.WaitGroup
	if srv.checkpoint != nil {
		polled.Go(func() { ld.poll(rctx, f.poll) })
	}
	var wg sync.WaitGroup
	for range f.concurrency {
		wg.Go(func() { ld.work(rctx) })
	}
	sleepCtx(ctx, f.warmup)
	cpu0, err := srv.child.CPU()
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	self0, t0, rq0 := loadtest.CPUTime(), time.Now(), loadtest.PidRunqWait(srv.child.Pid())
	ld.phase.Store(phaseMeasure)
	profc := make(chan error, 1)
	if profile != "" {
		go func() { profc <- saveProfile(ctx, srv.profileURL, f.duration, profile) }()
	}
	sleepCtx(ctx, f.duration)
	ld.phase.Store(phaseStop)
	cpu1, err := srv.child.CPU()
	elapsed, self := time.Since(t0), loadtest.CPUTime()-self0
	res.RunqWaitMS = loadtest.MS(loadtest.PidRunqWait(srv.child.Pid())-rq0) / elapsed.Seconds()
	wg.Wait()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if profile != "" {
		if err := <-profc; err != nil {
			return err
		}
	}
	if srv.checkpoint != nil {
		for deadline := time.Now().Add(f.cpWait); ld.tracker.Waiting() > 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	cancel()
	polled.Wait()
	ld.fill(res, elapsed, cpu1-cpu0, self)
	if res.Requests == 0 {
		return fmt.Errorf("no request acknowledged in the window (%d errors: %s)", res.Errors, res.FirstError)
	}
	return nil
}

// fill writes the round's figures into res.
func (ld *load) fill(res *roundResult, elapsed, cpu, self time.Duration) {
	res.Requests = ld.requests.Load()
	res.Events = res.Requests * int64(ld.batch)
	res.Seconds = elapsed.Seconds()
	res.WritesPerSec = float64(res.Requests) / elapsed.Seconds()
	res.EventsPerSec = float64(res.Events) / elapsed.Seconds()
	res.ServerCPU, res.ClientCPU = cpu.Seconds(), self.Seconds()
	res.ServerCores = cpu.Seconds() / elapsed.Seconds()
	if res.Events > 0 {
		res.CPUPerEventUS = float64(cpu.Microseconds()) / float64(res.Events)
	}
	ms := loadtest.MS
	res.AckP50, res.AckP99 = ms(ld.ack.Pct(.5)), ms(ld.ack.Pct(.99))
	if ld.srv.checkpoint != nil {
		cp := ld.tracker.Latencies()
		res.CheckpointP50, res.CheckpointP99 = ms(cp.Pct(.5)), ms(cp.Pct(.99))
		fa := ld.tracker.FromAck()
		res.FromAckP50, res.FromAckP99 = ms(fa.Pct(.5)), ms(fa.Pct(.99))
		res.Uncovered = ld.tracker.Waiting()
	}
	res.Errors = ld.errors.Load()
	if e, ok := ld.firstErr.Load().(string); ok {
		res.FirstError = e
	}
}

// work sends requests until the round stops. A request counts when its
// ack arrives inside the measured window, whenever it started: in steady
// state that is the rate, without a bias at the window's edges.
func (ld *load) work(ctx context.Context) {
	var buf []byte
	var resp bytes.Buffer
	for ld.phase.Load() != phaseStop && ctx.Err() == nil {
		first := ld.next.Add(uint64(ld.batch)) - uint64(ld.batch)
		buf = ld.srv.body(buf[:0], ld.bodies, first, ld.batch)
		start := time.Now()
		size, err := ld.post(ctx, buf, &resp)
		if err != nil {
			buf = nil // the transport may still hold the old one
			if ctx.Err() == nil && ld.phase.Load() == phaseMeasure {
				ld.errors.Add(1)
				ld.firstErr.CompareAndSwap(nil, err.Error())
			}
			continue
		}
		if ld.phase.Load() != phaseMeasure {
			continue
		}
		ld.requests.Add(1)
		acked := time.Now()
		ld.ack.Add(acked.Sub(start))
		if ld.srv.checkpoint != nil {
			ld.tracker.AckedAt(size, start, acked)
		}
	}
}

// post sends one body and returns the tree size its ack reports.
func (ld *load) post(ctx context.Context, body []byte, resp *bytes.Buffer) (uint64, error) {
	if err := ld.client.post(ctx, body, resp); err != nil {
		return 0, err
	}
	return ld.srv.size(resp.Bytes())
}

// poll fetches the target's checkpoint every interval and reports each
// new size to the tracker, timed when its response arrived.
func (ld *load) poll(ctx context.Context, interval time.Duration) {
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}, Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		size, err := ld.srv.checkpoint(ctx, cl)
		if err != nil || size <= last {
			continue
		}
		last = size
		ld.tracker.Checkpoint(size, time.Now())
	}
}

// saveProfile saves the CPU profile of the next d from the child's
// /debug/pprof/ at base to path.
func saveProfile(ctx context.Context, base string, d time.Duration, path string) error {
	if base == "" {
		return fmt.Errorf("profile: the target serves no /debug/pprof")
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%sprofile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: GET %s: %s", req.URL, resp.Status)
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(fh, resp.Body); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

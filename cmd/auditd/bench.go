package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

const benchUsage = `Usage: auditd bench MODE [flags]

Modes:
  append   durable appends to an in-process ledger (no HTTP)
  http     HTTP ingestion: POST batches to a server, time append and checkpoint
  proofs   inclusion proofs over HTTP against one log
  kafka    Kafka ingestion from an in-process broker (see "auditd bench kafka -h")
  derive   a derivation check end to end against PostgreSQL (see "auditd bench derive -h")
  verify   that check through auditd verify --server's remote ledger (see "auditd bench verify -h")

Without -server, http and proofs start an auditd on a loopback port with a
temporary data directory. Every mode prints events (or proofs) per second
and latency percentiles. Payloads are 256 bytes and ids 36-character UUIDs
unless flags say otherwise.

`

type benchFlags struct {
	mode        string
	server      string
	dir         string
	log         string
	events      int
	batch       int
	payload     int
	producers   int
	logs        int
	random      bool
	storage     bool
	requests    int
	concurrency int
	jsonOut     string
	scrubRate   float64
}

func runBench(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, benchUsage)
		return usageError{errors.New("bench: name a mode")}
	}
	if args[0] == "kafka" {
		return benchKafka(args[1:])
	}
	if args[0] == "derive" {
		return benchDerive(args[1:])
	}
	if args[0] == "verify" {
		return benchVerify(args[1:])
	}
	f := benchFlags{mode: args[0]}
	fset := flag.NewFlagSet("bench "+f.mode, flag.ContinueOnError)
	fset.StringVar(&f.server, "server", "", "auditd URL (http, proofs); empty starts one in-process")
	fset.StringVar(&f.dir, "data-dir", "", "data directory for an in-process ledger (default: a temporary one, removed after)")
	fset.StringVar(&f.log, "log", "bench", "log name")
	fset.IntVar(&f.events, "events", 1_000_000, "events to append (append, http; proofs: entries to load first when in-process)")
	fset.IntVar(&f.batch, "batch", 1000, "events per request")
	fset.IntVar(&f.payload, "payload", 256, "payload bytes per event")
	fset.IntVar(&f.producers, "producers", 4, "concurrent producers")
	fset.IntVar(&f.logs, "logs", 1, "logs to spread appends over (append)")
	fset.BoolVar(&f.random, "random-payload", false, "incompressible random payload bytes instead of a JSON object")
	fset.BoolVar(&f.storage, "storage", false, "append: compact afterwards and report bytes on disk per entry, by kind of key")
	fset.IntVar(&f.requests, "requests", 200_000, "proofs: inclusion proofs to request")
	fset.IntVar(&f.concurrency, "concurrency", 8, "proofs: concurrent requests")
	fset.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	fset.Float64Var(&f.scrubRate, "scrub-rate", -1, "http, proofs: run a ledger scrub back to back at this many entries/s in the started auditd (-1: no scrub; 0: unthrottled)")
	fset.Usage = func() { fmt.Fprint(fset.Output(), benchUsage); fset.PrintDefaults() }
	if err := fset.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if f.events < 1 || f.batch < 1 || f.producers < 1 || f.payload < 16 || f.logs < 1 {
		return usageError{errors.New("bench: -events, -batch, -producers, -logs must be positive and -payload at least 16")}
	}
	ctx := context.Background()
	var res map[string]any
	var err error
	switch f.mode {
	case "append":
		res, err = benchAppend(ctx, f)
	case "http":
		res, err = withServer(ctx, &f, func() (map[string]any, error) { return benchHTTP(ctx, f) })
	case "proofs":
		res, err = withServer(ctx, &f, func() (map[string]any, error) { return benchProofs(ctx, f) })
	default:
		return usageError{fmt.Errorf("bench: unknown mode %q (append, http, proofs, kafka)", f.mode)}
	}
	if err != nil {
		return err
	}
	res["mode"] = f.mode
	if f.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		return os.WriteFile(f.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// eventGen makes events: 36-character UUID ids and payloads of a fixed size.
type eventGen struct {
	rng     *rand.Rand
	size    int
	random  bool
	counter uint64
}

func newEventGen(seed uint64, size int, random bool) *eventGen {
	return &eventGen{rng: rand.New(rand.NewPCG(seed, seed*0x9E3779B97F4A7C15+1)), size: size, random: random}
}

func (g *eventGen) id() string {
	a, b := g.rng.Uint64(), g.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", uint32(a>>32), uint16(a>>16), uint16(a)&0xfff, uint16(b>>48)&0x3fff|0x8000, b&0xffffffffffff)
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// payload returns size bytes: random bytes, or a JSON object padded to size.
func (g *eventGen) payload() ([]byte, bool) {
	if g.random {
		b := make([]byte, g.size)
		for i := range b {
			b[i] = byte(g.rng.Uint32())
		}
		return b, false
	}
	g.counter++
	head := fmt.Sprintf(`{"account":"acct-%06d","amount":%d,"pad":"`, g.rng.IntN(1_000_000), g.rng.IntN(100_000))
	pad := g.size - len(head) - 2
	if pad < 0 {
		pad = 0
	}
	b := make([]byte, 0, g.size)
	b = append(b, head...)
	for i := 0; i < pad; i++ {
		b = append(b, alnum[g.rng.IntN(len(alnum))])
	}
	return append(b, '"', '}'), true
}

// latencies collects durations and reports percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

func (l *latencies) pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	return l.d[int(p*float64(len(l.d)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cpTracker times each request from its start to the first checkpoint that
// covers it.
type cpTracker struct {
	mu       sync.Mutex
	pending  []cpWait
	lat      latencies
	lastSize uint64    // the newest checkpoint seen
	lastAt   time.Time // when it was seen
}

type cpWait struct {
	size  uint64
	start time.Time
}

func (t *cpTracker) acked(size uint64, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if size <= t.lastSize {
		// The covering checkpoint was seen before the ack was.
		t.lat.add(t.lastAt.Sub(start))
		return
	}
	t.pending = append(t.pending, cpWait{size, start})
}

func (t *cpTracker) checkpoint(size uint64, at time.Time) {
	t.mu.Lock()
	if size > t.lastSize {
		t.lastSize, t.lastAt = size, at
	}
	k := 0
	for _, w := range t.pending {
		if w.size <= size {
			t.lat.add(at.Sub(w.start))
			continue
		}
		t.pending[k] = w
		k++
	}
	t.pending = t.pending[:k]
	t.mu.Unlock()
}

func (t *cpTracker) waiting() int { t.mu.Lock(); defer t.mu.Unlock(); return len(t.pending) }

// openBenchLedger opens a quiet ledger in dir with a fresh signing key.
func openBenchLedger(dir string, opts ...ledger.Option) (*ledger.Store, error) {
	skey, vkey, err := note.GenerateKey(crand.Reader, "bench.local")
	if err != nil {
		return nil, err
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return ledger.Open(dir, signer, verifier, append([]ledger.Option{ledger.WithLogger(quiet)}, opts...)...)
}

func benchAppend(ctx context.Context, f benchFlags) (map[string]any, error) {
	dir, cleanup, err := benchDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	st, err := openBenchLedger(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	logs := make([]*ledger.Log, f.logs)
	trackers := make([]*cpTracker, f.logs)
	for i := range logs {
		name := f.log
		if f.logs > 1 {
			name = fmt.Sprintf("%s.%d", f.log, i)
		}
		if logs[i], err = st.CreateLog(name); err != nil {
			return nil, err
		}
		trackers[i] = &cpTracker{}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watchers sync.WaitGroup
	for i, l := range logs {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			for next := uint64(1); ; {
				cp, err := l.WaitCheckpoint(wctx, next)
				if err != nil {
					return
				}
				trackers[i].checkpoint(cp.Size, time.Now())
				next = cp.Size + 1
			}
		}()
	}
	reqs := (f.events + f.batch - 1) / f.batch
	// Events are made before the clock starts, so the run measures the
	// ledger, not the generator. Every id and payload is unique.
	fmt.Printf("bench: generating %d events ...\n", reqs*f.batch)
	batches := make([][]ledger.Entry, reqs)
	var gen sync.WaitGroup
	for p := 0; p < 2; p++ {
		gen.Add(1)
		go func() {
			defer gen.Done()
			g := newEventGen(uint64(p)+1, f.payload, f.random)
			for r := p; r < reqs; r += 2 {
				es := make([]ledger.Entry, f.batch)
				for i := range es {
					pl, isJSON := g.payload()
					es[i] = ledger.Entry{ID: g.id(), Payload: pl, PayloadJSON: isJSON}
				}
				batches[r] = es
			}
		}()
	}
	gen.Wait()
	var appendLat latencies
	elapsed, err := drive("append", f.producers, reqs, int64(f.batch), func(_, r int) error {
		es := batches[r]
		batches[r] = nil
		li := r % len(logs)
		t0 := time.Now()
		res, err := logs[li].Append(ctx, es)
		if err != nil {
			return err
		}
		appendLat.add(time.Since(t0))
		trackers[li].acked(res.Size, t0)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Wait for the last checkpoints so every request is timed.
	for i, t := range trackers {
		for t.waiting() > 0 {
			if _, err := logs[i].WaitCheckpoint(ctx, logs[i].Size()); err != nil {
				return nil, err
			}
			time.Sleep(time.Millisecond)
		}
	}
	stopWatch()
	watchers.Wait()
	var cpLat latencies
	for _, t := range trackers {
		cpLat.d = append(cpLat.d, t.lat.d...)
	}
	n := reqs * f.batch
	res := map[string]any{
		"events": n, "seconds": elapsed.Seconds(), "events_per_second": float64(n) / elapsed.Seconds(),
		"append_p50_ms": ms(appendLat.pct(.5)), "append_p99_ms": ms(appendLat.pct(.99)),
		"checkpoint_p50_ms": ms(cpLat.pct(.5)), "checkpoint_p99_ms": ms(cpLat.pct(.99)),
		"logs": f.logs, "producers": f.producers, "batch": f.batch, "payload_bytes": f.payload,
	}
	fmt.Printf("append: %d events in %.2fs = %.0f events/s (%d logs, %d producers, %d per request, %d-byte payloads)\n",
		n, elapsed.Seconds(), res["events_per_second"], f.logs, f.producers, f.batch, f.payload)
	fmt.Printf("append latency (request to durable ack): p50 %.1f ms  p99 %.1f ms\n", res["append_p50_ms"], res["append_p99_ms"])
	fmt.Printf("append to covering signed checkpoint:    p50 %.1f ms  p99 %.1f ms\n", res["checkpoint_p50_ms"], res["checkpoint_p99_ms"])
	if f.storage {
		if err := reportStorage(st, n, f.payload, res); err != nil {
			return nil, err
		}
	}
	return res, nil
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

func benchDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "auditd-bench-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// withServer runs fn against f.server, starting an in-process daemon on a
// loopback port first if no server was named.
func withServer(ctx context.Context, f *benchFlags, fn func() (map[string]any, error)) (map[string]any, error) {
	if f.server != "" {
		f.server = strings.TrimRight(f.server, "/")
		return fn()
	}
	dir, cleanup, err := benchDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen = dir, "127.0.0.1:0"
	cfg.Checks = benchChecks(*f)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sctx, stop := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(sctx, cfg, quiet, ready) }()
	select {
	case addr := <-ready:
		f.server = "http://" + addr
	case err := <-done:
		stop()
		return nil, err
	}
	fmt.Printf("bench: started auditd at %s (data in %s)\n", f.server, dir)
	res, err := fn()
	stop()
	if serr := <-done; err == nil && serr != nil {
		err = serr
	}
	return res, err
}

var benchHTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 2 * time.Minute}

// ndjsonBodies prebuilds request bodies so the client spends little CPU
// during the run.
func ndjsonBodies(f benchFlags, n int, seed uint64) [][]byte {
	gen := newEventGen(seed, f.payload, f.random)
	bodies := make([][]byte, n)
	for i := range bodies {
		var buf bytes.Buffer
		for j := 0; j < f.batch; j++ {
			pl, isJSON := gen.payload()
			if isJSON {
				fmt.Fprintf(&buf, `{"id":%q,"payload":%s}`+"\n", gen.id(), pl)
			} else {
				b, _ := json.Marshal(pl)
				fmt.Fprintf(&buf, `{"id":%q,"payload_base64":%s}`+"\n", gen.id(), b)
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
	// Bodies are built per producer in chunks and reused round-robin: ids
	// must be unique, so each body is sent once.
	fmt.Printf("bench: building %d request bodies ...\n", reqs)
	bodies := ndjsonBodies(f, reqs, 7)
	var tracker cpTracker
	var appendLat latencies
	pctx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pollCheckpoints(pctx, f.server, f.log, v, &tracker)
	}()
	url := f.server + "/v1/logs/" + f.log + "/entries"
	scrub := startScrubMeter(ctx, f.server)
	elapsed, err := drive("http", f.producers, reqs, int64(f.batch), func(_, r int) error {
		t0 := time.Now()
		size, err := postBatch(ctx, url, bodies[r])
		if err != nil {
			return err
		}
		appendLat.add(time.Since(t0))
		tracker.acked(size, t0)
		return nil
	})
	if err != nil {
		stopPoll()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for tracker.waiting() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stopPoll()
	<-polled
	n := reqs * f.batch
	res := map[string]any{
		"events": n, "seconds": elapsed.Seconds(), "events_per_second": float64(n) / elapsed.Seconds(),
		"append_p50_ms": ms(appendLat.pct(.5)), "append_p99_ms": ms(appendLat.pct(.99)),
		"checkpoint_p50_ms": ms(tracker.lat.pct(.5)), "checkpoint_p99_ms": ms(tracker.lat.pct(.99)),
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
	resp, err := benchHTTPClient.Do(req)
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

func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if t := os.Getenv("AUDITD_READ_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := benchHTTPClient.Do(req)
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
func pollCheckpoints(ctx context.Context, server, log string, v note.Verifier, t *cpTracker) {
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
		t.checkpoint(cp.Size, now)
	}
}

func benchProofs(ctx context.Context, f benchFlags) (map[string]any, error) {
	v, err := fetchVerifier(ctx, f.server)
	if err != nil {
		return nil, err
	}
	origin := v.Name() + "/" + f.log
	b, err := httpGet(ctx, f.server+"/v1/logs/"+f.log+"/checkpoint")
	if err != nil {
		// An in-process server starts empty: load it.
		fmt.Printf("bench: loading %d entries into %s ...\n", f.events, f.log)
		if _, err := benchHTTP(ctx, f); err != nil {
			return nil, err
		}
		if b, err = httpGet(ctx, f.server+"/v1/logs/"+f.log+"/checkpoint"); err != nil {
			return nil, err
		}
	}
	cp, err := merkle.OpenCheckpoint(b, v, origin)
	if err != nil {
		return nil, err
	}
	fmt.Printf("proofs: %d inclusion proofs, %d concurrent, against %s at size %d\n", f.requests, f.concurrency, origin, cp.Size)
	var lat latencies
	var verified atomic.Int64
	rngs := make([]*rand.Rand, f.concurrency)
	for c := range rngs {
		rngs[c] = rand.New(rand.NewPCG(uint64(c), 99))
	}
	elapsed, err := drive("proofs", f.concurrency, f.requests, 1, func(c, r int) error {
		idx := rngs[c].Uint64N(cp.Size)
		t0 := time.Now()
		body, err := httpGet(ctx, fmt.Sprintf("%s/v1/logs/%s/proof/inclusion?index=%d&size=%d", f.server, f.log, idx, cp.Size))
		if err != nil {
			return err
		}
		lat.add(time.Since(t0))
		if r%100 != 0 { // verify one proof in 100, so the client stays light
			return nil
		}
		var p struct {
			LeafHash merkle.Hash   `json:"leaf_hash"`
			Hashes   []merkle.Hash `json:"hashes"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return err
		}
		if err := merkle.VerifyInclusion(idx, cp.Size, p.LeafHash, p.Hashes, cp.Root); err != nil {
			return err
		}
		verified.Add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := map[string]any{
		"proofs": f.requests, "tree_size": cp.Size, "seconds": elapsed.Seconds(),
		"proofs_per_second": float64(f.requests) / elapsed.Seconds(),
		"p50_ms":            ms(lat.pct(.5)), "p99_ms": ms(lat.pct(.99)), "verified": verified.Load(),
	}
	fmt.Printf("proofs: %d in %.2fs = %.0f proofs/s; latency p50 %.2f ms p99 %.2f ms; %d verified client-side\n",
		f.requests, elapsed.Seconds(), res["proofs_per_second"], res["p50_ms"], res["p99_ms"], verified.Load())
	return res, nil
}

// drive runs jobs 0..jobs-1 on workers goroutines, fn(worker, job) each,
// with progress counted in units per job. It stops at the first error and
// returns the time the jobs took.
func drive(name string, workers, jobs int, units int64, fn func(worker, job int) error) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Bool
	prog := newProgress(name, int64(jobs)*units)
	errc := make(chan error, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				j := next.Add(1) - 1
				if j >= int64(jobs) {
					return
				}
				if err := fn(w, int(j)); err != nil {
					failed.Store(true)
					errc <- err
					return
				}
				prog.add(units)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.done()
	select {
	case err := <-errc:
		return elapsed, err
	default:
		return elapsed, nil
	}
}

// progress prints a line to stderr every few seconds on long runs.
type progress struct {
	name  string
	total int64
	n     atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newProgress(name string, total int64) *progress {
	p := &progress{name: name, total: total, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				n := p.n.Load()
				fmt.Fprintf(os.Stderr, "%s: %d/%d (%.0f%%), %.0f/s\n", p.name, n, p.total, 100*float64(n)/float64(p.total), float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	return p
}

func (p *progress) add(n int64) { p.n.Add(n) }
func (p *progress) done()       { close(p.stop); p.wg.Wait() }

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
)

// withServer runs fn against f.server, starting an in-process server on a
// loopback port first if no server was named.
func withServer(ctx context.Context, f *benchFlags, fn func() (map[string]any, error)) (map[string]any, error) {
	if f.server != "" {
		f.server = strings.TrimRight(f.server, "/")
		return fn()
	}
	dir, cleanup, err := loadtest.DataDir(f.dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	addr, stop, err := startServer(dir, f.scrubRate)
	if err != nil {
		return nil, err
	}
	f.server = "http://" + addr
	fmt.Printf("bench: started auditd at %s (data in %s)\n", f.server, dir)
	res, err := fn()
	if serr := stop(); err == nil && serr != nil {
		err = serr
	}
	return res, err
}

// Serve's defaults (auditd's defaultConfig) for what the server started
// here sets.
const (
	serveCheckpointInterval = 100 * time.Millisecond
	serveMaxBatch           = 16384
	serveCacheBytes         = 128 << 20
)

// startServer starts what "auditd serve" runs for the http and proofs
// modes, wired from the same packages with serve's defaults: the ledger in
// dir, the API (logs created on first POST, /metrics with the Go and
// process collectors and auditd_ metrics), and with scrubRate >= 0 a ledger
// scrub every second at scrubRate entries/s (0: unthrottled), which runs
// back to back once the ledger takes longer than a second to scrub. It
// has no alert manager, derivations, Kafka source or other checkers: none
// of them has work during these modes, and leaving them out keeps the
// figures comparable across versions. stop drains the server and closes
// the ledger.
func startServer(dir string, scrubRate float64) (addr string, stop func() error, err error) {
	store, verifier, vkey, err := loadtest.OpenLedger(dir, "auditd.local",
		ledger.WithCheckpointInterval(serveCheckpointInterval), ledger.WithMaxBatch(serveMaxBatch), ledger.WithCacheSize(serveCacheBytes))
	if err != nil {
		return "", nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	auditdReg := prometheus.WrapRegistererWithPrefix("auditd_", reg)
	stopScrub := func() {}
	if scrubRate >= 0 {
		if stopScrub, err = startScrub(store, verifier, scrubRate, auditdReg); err != nil {
			store.Close()
			return "", nil, err
		}
	}
	srv := api.New(store, vkey, api.Options{Limits: api.Limits{CreateLogs: true}, Components: api.Components{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})}, Logger: loadtest.Quiet()})
	for _, c := range append(store.Collectors(), srv.Collectors()...) {
		auditdReg.MustRegister(c)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopScrub()
		store.Close()
		return "", nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go hs.Serve(ln)
	return ln.Addr().String(), func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		herr := hs.Shutdown(sctx)
		stopScrub()
		if err := store.Close(); err != nil {
			return err
		}
		return herr
	}, nil
}

// startScrub runs the ledger scrub every second at rate entries/s until
// stop is called, with serve's jitter rule (a tenth of the interval).
func startScrub(store *ledger.Store, v note.Verifier, rate float64, reg prometheus.Registerer) (stop func(), err error) {
	kv, err := store.Bucket("checks")
	if err != nil {
		return nil, err
	}
	r := checkers.NewRunner(kv, checkers.Options{Logger: loadtest.Quiet()})
	sched := checkers.Schedule{Interval: time.Second, Jitter: time.Second / 10, Rate: rate}
	if err := r.Register(checkers.NewScrub(checkers.StoreSource(store), v), sched); err != nil {
		return nil, err
	}
	for _, c := range r.Collectors() {
		reg.MustRegister(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

var (
	scrubbedLine = regexp.MustCompile(`(?m)^auditd_checks_entries_checked_total\{checker="scrub"\} (\S+)$`)
	cpuLine      = regexp.MustCompile(`(?m)^process_cpu_seconds_total (\S+)$`)
)

// scrape reads the entries the server's scrub has checked and the server
// process's CPU seconds from its /metrics; -1 for what it does not export.
func scrape(ctx context.Context, server string) (scrubbed, cpu float64) {
	b, err := httpGet(ctx, server+"/metrics")
	if err != nil {
		return -1, -1
	}
	val := func(re *regexp.Regexp) float64 {
		m := re.FindSubmatch(b)
		if m == nil {
			return -1
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return -1
		}
		return v
	}
	return val(scrubbedLine), val(cpuLine)
}

// scrubMeter reports how fast the server scrubbed during a benchmark and
// the CPU the server process spent (with an in-process server, the bench's
// client is in that process too). CPU seconds per event compare better
// than events/s on a machine shared with other work.
type scrubMeter struct {
	server       string
	scrub0, cpu0 float64
}

func startScrubMeter(ctx context.Context, server string) scrubMeter {
	s, c := scrape(ctx, server)
	return scrubMeter{server: server, scrub0: s, cpu0: c}
}

// report adds scrub_entries, scrub_entries_per_second and
// process_cpu_seconds to res and prints them.
func (s scrubMeter) report(ctx context.Context, elapsed time.Duration, events int, res map[string]any) {
	scrub, cpu := scrape(ctx, s.server)
	if s.cpu0 >= 0 && cpu >= 0 {
		res["process_cpu_seconds"] = cpu - s.cpu0
		fmt.Printf("process CPU: %.2f s = %.2f µs per event\n", cpu-s.cpu0, (cpu-s.cpu0)/float64(events)*1e6)
	}
	if s.scrub0 >= 0 && scrub > s.scrub0 {
		n := scrub - s.scrub0
		res["scrub_entries"], res["scrub_entries_per_second"] = n, n/elapsed.Seconds()
		fmt.Printf("scrub meanwhile: %.0f entries checked = %.0f entries/s\n", n, n/elapsed.Seconds())
	}
}

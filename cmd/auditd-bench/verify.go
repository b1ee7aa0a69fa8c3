package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/jackc/pgx/v5"
)

const benchVerifyUsage = `Usage: auditd-bench verify -data-dir DIR [flags]

Measures auditd verify --server: the derivation check of "auditd bench
derive" (a sum of amounts by account over the log "payments", compared with
PostgreSQL) run through rederive.RemoteLedger, which fetches every entry
over HTTP and proves it against the signed checkpoint. The server is an
auditd API on a loopback port in this process, over the ledger of a load
made by

  auditd-bench derive -phase load -data-dir DIR -events N

so the two share the CPUs; the run's time is the wall time of the check,
-runs times, with the requests served by kind.

With -cache-dir the client keeps the bundles it reads there (auditd verify
--cache-dir): the first run fills it, later runs read it (warm). With
-json-pages it reads the entries from the JSON listing instead of bundles
(the path before payload bundles). With -local it runs the same check on
the ledger in -data-dir directly (auditd verify --data-dir), for a
comparison in the same harness. With -drift it changes one account's
balance in the table first, expects the run to find that drift (and
trace it), and puts the balance back after.

`

func runVerify(args []string) error {
	f := benchDeriveFlags{set: map[string]bool{}, phase: "verify"}
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.StringVar(&f.dir, "data-dir", "", "data directory of an \"auditd-bench derive -phase load\"")
	fs.StringVar(&f.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN of the derived store")
	fs.IntVar(&f.workers, "workers", 0, "Runner workers (0: GOMAXPROCS)")
	runs := fs.Int("runs", 3, "runs of the check")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	cacheDir := fs.String("cache-dir", "", "keep and read proven bundles in this directory (auditd verify --cache-dir)")
	jsonPages := fs.Bool("json-pages", false, "read entries from the JSON listing, not from entry and payload bundles")
	local := fs.Bool("local", false, "run the check on the data dir directly (auditd verify --data-dir), not over HTTP")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	drift := fs.Bool("drift", false, "change one balance in the table before the runs (restored after) and expect that drift")
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchVerifyUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return done(err)
	}
	if fs.NArg() > 0 || f.dir == "" || *runs < 1 {
		return errors.New("verify: want -data-dir of a load, -runs at least 1, no arguments")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := map[string]any{"mode": "verify", "cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0)}
	st, m, err := deriveSetup(ctx, f.dir, &f, res)
	if err != nil {
		return err
	}
	defer st.Close()
	_, verifier, err := deriveKeys(m)
	if err != nil {
		return err
	}

	quiet := loadtest.Quiet()
	url, requests, stopServer, err := countingServer(st, m.VerifierKey)
	if err != nil {
		return err
	}
	defer stopServer()
	job, err := deriveJob("bench-verify.yaml", f.pg)
	if err != nil {
		return err
	}
	workers := deriveWorkers(f.workers)
	fmt.Printf("verify: %d events over HTTP from %s, %d workers, GOMAXPROCS %d\n", f.events, url, workers, runtime.GOMAXPROCS(0))
	var cache *client.BundleCache
	if *cacheDir != "" {
		if cache, err = client.OpenBundleCache(*cacheDir); err != nil {
			return err
		}
	}
	want := rederive.StateClean
	if *drift {
		restore, err := benchDrift(ctx, f.pg)
		if err != nil {
			return err
		}
		defer restore()
		want = rederive.StateDrift
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var times []float64
	for i := range *runs {
		requests.reset()
		var lg rederive.Ledger = &rederive.RemoteLedger{Client: client.New(url, verifier), JSONPages: *jsonPages, Cache: cache}
		if *local {
			lg = rederive.LocalLedger{Store: st}
		}
		var stats0 client.CacheStats
		if cache != nil {
			stats0 = cache.Stats()
		}
		r := rederive.NewRunner(lg, rederive.WithWorkers(workers), rederive.WithLogger(quiet))
		la0, cpu0, t0 := loadtest.LoadAvg(1), loadtest.CPUTime(), time.Now()
		rep, err := r.Run(ctx, job, true)
		took, cpu := time.Since(t0), loadtest.CPUTime()-cpu0
		if err != nil {
			return err
		}
		if rep.State != want || rep.Events != uint64(f.events) {
			return fmt.Errorf("verify: run %d is %s with %d events (%s: %s)", i+1, rep.State, rep.Events, rep.ErrorKind, rep.Error)
		}
		kinds := requests.kinds()
		if cache != nil {
			st := cache.Stats()
			kinds = append(kinds, fmt.Sprintf("cache hits %d misses %d bad %d", st.Hits-stats0.Hits, st.Misses-stats0.Misses, st.Bad-stats0.Bad))
		}
		res[fmt.Sprintf("run_%d_cpu_seconds", i+1)] = cpu.Seconds()
		times = append(times, took.Seconds())
		fmt.Printf("verify: run %d: %.2fs (%.0f events/s), %.2f CPU-s in the process (client and server), load average %s then %s; requests: %s\n",
			i+1, took.Seconds(), float64(f.events)/took.Seconds(), cpu.Seconds(), la0, loadtest.LoadAvg(1), strings.Join(kinds, ", "))
		res[fmt.Sprintf("run_%d_seconds", i+1)] = took.Seconds()
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	res["median_seconds"], res["events"] = med, f.events
	fmt.Printf("verify: median of %d runs %.2fs (%.0f events/s), best %.2fs\n", len(times), med, float64(f.events)/med, sorted[0])
	return writeJSON(f.jsonOut, "verify", res)
}

// requestCounts counts the requests a server handled by kind: the path
// under the log without the tile or bundle index ("tile/1",
// "tile/entries", "bundles", "payloads", "checkpoint"), or "entries range".
type requestCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounts) add(r *http.Request) {
	c.addKind(requestKind(r))
}

func (c *requestCounts) addKind(kind string) {
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
}

// requestKind is the kind requestCounts counts r as.
func requestKind(r *http.Request) string {
	if r.URL.Query().Has("start") {
		return "entries range"
	}
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/v1/logs/"); ok {
		_, p, _ = strings.Cut(rest, "/") // drop the log's name
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if parts[0] == "tile" && len(parts) > 1 {
		return "tile/" + parts[1]
	}
	return parts[0]
}

func (c *requestCounts) reset() { c.mu.Lock(); clear(c.n); c.mu.Unlock() }

// kinds returns "kind count" for each kind, sorted.
func (c *requestCounts) kinds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kinds []string
	for k, n := range c.n {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	return kinds
}

// countingServer serves st's API on a loopback port, counting requests.
func countingServer(st *ledger.Store, vkey string) (string, *requestCounts, func(), error) {
	counts := &requestCounts{n: map[string]int{}}
	srv := api.New(st, vkey, api.Options{Logger: loadtest.Quiet()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counts.add(r)
		srv.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), counts, func() { hs.Close() }, nil
}

// benchDrift adds 1 to the balance of one account in the table at dsn and
// returns the function that takes it back.
func benchDrift(ctx context.Context, dsn string) (func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var account string
	if err := conn.QueryRow(ctx, "SELECT account FROM "+deriveTable+" ORDER BY account LIMIT 1").Scan(&account); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "UPDATE "+deriveTable+" SET balance = balance + 1 WHERE account = $1", account); err != nil {
		return nil, err
	}
	return func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			fmt.Fprintf(os.Stderr, "verify: restore the drifted balance of %s: %v\n", account, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "UPDATE "+deriveTable+" SET balance = balance - 1 WHERE account = $1", account); err != nil {
			fmt.Fprintf(os.Stderr, "verify: restore the drifted balance of %s: %v\n", account, err)
		}
	}, nil
}

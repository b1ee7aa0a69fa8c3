package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// benchChecks is the self-audit of a daemon the http and proofs benchmarks
// start: none by default, so that figures compare across versions; with
// -scrub-rate R >= 0, a ledger scrub every second at R entries/s, which
// runs back to back once the ledger takes longer than a second to scrub,
// so a scrub is running at that throttle for the whole benchmark.
func benchChecks(f benchFlags) ChecksConfig {
	if f.scrubRate < 0 {
		return ChecksConfig{}
	}
	return ChecksConfig{ScrubInterval: time.Second, ScrubRate: f.scrubRate}
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

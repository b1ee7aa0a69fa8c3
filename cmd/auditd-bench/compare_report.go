package main

import (
	"fmt"
	"math"
	"slices"
)

// targetSummary is one target's medians over the rounds, and their ratios
// to the reference target's.
type targetSummary struct {
	Target        string  `json:"target"`
	Rounds        int     `json:"rounds"`
	WritesPerSec  float64 `json:"writes_per_second"`
	EventsPerSec  float64 `json:"events_per_second"`
	CPUPerEventUS float64 `json:"server_cpu_us_per_event"`
	AckP50        float64 `json:"ack_p50_ms"`
	AckP99        float64 `json:"ack_p99_ms"`
	CheckpointP50 float64 `json:"checkpoint_p50_ms,omitempty"`
	CheckpointP99 float64 `json:"checkpoint_p99_ms,omitempty"`
	FromAckP50    float64 `json:"ack_to_checkpoint_p50_ms,omitempty"`
	FromAckP99    float64 `json:"ack_to_checkpoint_p99_ms,omitempty"`
	Errors        int64   `json:"errors"`
	// RateRatio and CPURatio are the medians over rounds of this target's
	// events/s and CPU per event over the reference's in the same round.
	RateRatio float64 `json:"events_per_second_ratio"`
	CPURatio  float64 `json:"cpu_per_event_ratio"`
}

// summarize takes each target's medians over its rounds.
func summarize(f compareFlags, rounds []roundResult) []targetSummary {
	ref := map[int]roundResult{}
	for _, r := range rounds {
		if r.Target == f.ref {
			ref[r.Round] = r
		}
	}
	var out []targetSummary
	for _, spec := range f.targets {
		var mine []roundResult
		for _, r := range rounds {
			if r.Target == spec.label {
				mine = append(mine, r)
			}
		}
		col := func(v func(roundResult) float64) float64 {
			xs := make([]float64, 0, len(mine))
			for _, r := range mine {
				xs = append(xs, v(r))
			}
			return median(xs)
		}
		s := targetSummary{Target: spec.label, Rounds: len(mine),
			WritesPerSec:  col(func(r roundResult) float64 { return r.WritesPerSec }),
			EventsPerSec:  col(func(r roundResult) float64 { return r.EventsPerSec }),
			CPUPerEventUS: col(func(r roundResult) float64 { return r.CPUPerEventUS }),
			AckP50:        col(func(r roundResult) float64 { return r.AckP50 }),
			AckP99:        col(func(r roundResult) float64 { return r.AckP99 }),
			CheckpointP50: col(func(r roundResult) float64 { return r.CheckpointP50 }),
			CheckpointP99: col(func(r roundResult) float64 { return r.CheckpointP99 }),
			FromAckP50:    col(func(r roundResult) float64 { return r.FromAckP50 }),
			FromAckP99:    col(func(r roundResult) float64 { return r.FromAckP99 }),
			RateRatio:     col(func(r roundResult) float64 { return ratio(r.EventsPerSec, ref[r.Round].EventsPerSec) }),
			CPURatio:      col(func(r roundResult) float64 { return ratio(r.CPUPerEventUS, ref[r.Round].CPUPerEventUS) }),
		}
		for _, r := range mine {
			s.Errors += r.Errors
		}
		out = append(out, s)
	}
	return out
}

// ratio is a/b, 0 when b is (JSON has no NaN).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// median is the middle value of xs (the mean of the two middle ones for
// an even count), NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

const roundRow = "%-5s %-22s %9s %9s %9s %9s %9s %9s %9s %6s %5s %6s %6s %6s\n"

func printRoundHeader() {
	fmt.Println("(cpu us/ev and cores: the server child's utime+stime over the window; runq: ms per s its threads waited for a CPU;")
	fmt.Println(" client: this generator's CPU over the window; ack and cp: ms from POST start to its ack, to the first signed checkpoint covering it)")
	fmt.Printf(roundRow, "round", "target", "writes/s", "events/s", "cpu us/ev", "ack p50", "ack p99", "cp p50", "cp p99", "errors", "cores", "runq", "client", "load1")
}

func printRound(r roundResult) {
	cp50, cp99 := "-", "-"
	if r.CheckpointP50 > 0 || r.CheckpointP99 > 0 {
		cp50, cp99 = fmt.Sprintf("%.1f", r.CheckpointP50), fmt.Sprintf("%.1f", r.CheckpointP99)
		if r.Uncovered > 0 {
			cp99 += "+" // some acks saw no covering checkpoint in time
		}
	}
	fmt.Printf(roundRow, fmt.Sprint(r.Round), clip(r.Target, 22), fmt.Sprintf("%.0f", r.WritesPerSec), fmt.Sprintf("%.0f", r.EventsPerSec),
		fmt.Sprintf("%.2f", r.CPUPerEventUS), fmt.Sprintf("%.1f", r.AckP50), fmt.Sprintf("%.1f", r.AckP99), cp50, cp99,
		fmt.Sprint(r.Errors), fmt.Sprintf("%.2f", r.ServerCores), fmt.Sprintf("%.0f", r.RunqWaitMS), fmt.Sprintf("%.1fs", r.ClientCPU), r.Load1)
}

const sumRow = "%-22s %11s %11s %8s %10s %8s %9s %9s %9s %9s %9s %9s\n"

func printSummary(f compareFlags, sum []targetSummary) {
	fmt.Printf("\nmedians over %d rounds (ratios: median of the per-round ratios to %s; ack and cp in ms from POST start;\n a>cp: ms from each ack to the first checkpoint covering it)\n", f.rounds, f.ref)
	fmt.Printf(sumRow, "target", "writes/s", "events/s", "ratio", "cpu us/ev", "ratio", "ack p50", "ack p99", "cp p50", "cp p99", "a>cp p50", "a>cp p99")
	for _, s := range sum {
		cp50, cp99, fa50, fa99 := "-", "-", "-", "-"
		if s.CheckpointP50 > 0 || s.CheckpointP99 > 0 {
			cp50, cp99 = fmt.Sprintf("%.1f", s.CheckpointP50), fmt.Sprintf("%.1f", s.CheckpointP99)
			fa50, fa99 = fmt.Sprintf("%.1f", s.FromAckP50), fmt.Sprintf("%.1f", s.FromAckP99)
		}
		fmt.Printf(sumRow, clip(s.Target, 22), fmt.Sprintf("%.0f", s.WritesPerSec), fmt.Sprintf("%.0f", s.EventsPerSec),
			fmt.Sprintf("%.2f", s.RateRatio), fmt.Sprintf("%.2f", s.CPUPerEventUS), fmt.Sprintf("%.2f", s.CPURatio),
			fmt.Sprintf("%.1f", s.AckP50), fmt.Sprintf("%.1f", s.AckP99), cp50, cp99, fa50, fa99)
	}
}

// clip keeps the last n characters of s (a binary's path ends in what
// tells two apart).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n+1:]
}

package checkers

import (
	"slices"
	"time"
)

// Status is a checker's state, served by GET /v1/checks.
type Status struct {
	Name string `json:"name"`
	// Interval, IntervalSeconds, JitterSeconds and Rate are the schedule
	// (see Schedule); a checker with an interval of 0 runs only on demand
	// and its Interval reads "on-demand" (IntervalSeconds 0).
	Interval        string  `json:"interval"`
	IntervalSeconds float64 `json:"interval_seconds"`
	JitterSeconds   float64 `json:"jitter_seconds"`
	Rate            float64 `json:"rate"`
	// State is idle or running.
	State string `json:"state"`
	// NextRunAt is when the next scheduled pass starts (unset while one
	// runs or when unscheduled).
	NextRunAt time.Time `json:"next_run_at,omitzero"`
	// Current is the pass in progress.
	Current *CurrentRun `json:"current,omitempty"`
	// LastRun is the last pass that ended, and LastError its error.
	LastRun   *Run   `json:"last_run,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// LastRunFindings are the findings of a last pass that failed,
	// found before it stopped.
	LastRunFindings []Finding `json:"last_run_findings,omitempty"`
	// LastSuccessAt is the start of the last completed pass.
	LastSuccessAt time.Time `json:"last_success_at,omitzero"`
	// Findings are those of the last completed pass (at most
	// MaxFindings); FindingsByKind counts all of them.
	Findings       []Finding      `json:"findings"`
	FindingsByKind map[string]int `json:"findings_by_kind,omitempty"`
}

// CurrentRun is a pass in progress.
type CurrentRun struct {
	StartedAt      time.Time `json:"started_at"`
	EntriesChecked uint64    `json:"entries_checked"`
}

// Status reports every checker, by name.
func (r *Runner) Status() []Status {
	var out []Status
	for _, j := range r.all() {
		j.mu.Lock()
		st := Status{Name: j.c.Name(), Interval: intervalText(j.s.Interval), IntervalSeconds: j.s.Interval.Seconds(),
			JitterSeconds: j.s.Jitter.Seconds(), Rate: j.s.Rate, State: "idle",
			LastSuccessAt: j.rec.LastSuccess, FindingsByKind: j.rec.ByKind,
			Findings: slices.Clone(j.rec.Findings), LastRunFindings: slices.Clone(j.rec.LastFindings)}
		if st.Findings == nil {
			st.Findings = []Finding{}
		}
		if j.rec.LastRun != nil {
			run := *j.rec.LastRun
			st.LastRun, st.LastError = &run, run.Error
		}
		if p := j.current; p != nil {
			st.State = "running"
			st.Current = &CurrentRun{StartedAt: p.started.UTC(), EntriesChecked: p.checked.Load()}
		} else if j.s.Interval > 0 && !j.next.IsZero() {
			st.NextRunAt = j.next.UTC()
		}
		j.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// intervalText is a schedule's interval as GET /v1/checks shows it:
// "on-demand" for a checker that runs only when asked (interval 0).
func intervalText(d time.Duration) string {
	if d <= 0 {
		return "on-demand"
	}
	return d.String()
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/rederive"
)

// statusLog is the part of GET /v1/logs/{log} the table shows.
type statusLog struct {
	Name       string `json:"name"`
	Size       uint64 `json:"size"`
	Checkpoint *struct {
		Size uint64 `json:"size"`
	} `json:"checkpoint"`
	Source *struct {
		Lag *int64 `json:"lag"`
	} `json:"source"`
	Error    string `json:"error"`
	ReadOnly string `json:"read_only"`
}

// printStatus writes the four tables of `auditd status`.
func printStatus(w io.Writer, st *serverStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "auditd at %s\n\n", st.Server)
	fmt.Fprintln(tw, "LOG\tSIZE\tCHECKPOINT\tKAFKA LAG\tSTATE")
	for _, raw := range st.Logs {
		var l statusLog
		_ = json.Unmarshal(raw, &l)
		cp, lag, state := "none", "-", "ok"
		if l.Checkpoint != nil {
			cp = fmt.Sprint(l.Checkpoint.Size)
			if l.Checkpoint.Size < l.Size {
				cp += " (behind)"
			}
		}
		if l.Source != nil && l.Source.Lag != nil && *l.Source.Lag >= 0 { // -1: not fetched yet
			lag = fmt.Sprint(*l.Source.Lag)
		}
		switch {
		case l.Error != "":
			state = "error: " + l.Error
		case l.ReadOnly != "":
			state = "read-only: " + l.ReadOnly
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", l.Name, l.Size, cp, lag, state)
	}
	if len(st.Logs) == 0 {
		fmt.Fprintln(tw, "(no logs)")
	}
	printDerivations(tw, st.Derivations, now)
	printChecks(tw, st.Checks, now)
	printAlerts(tw, st.Alerts, now)
}

func printDerivations(tw io.Writer, ds []json.RawMessage, now time.Time) {
	fmt.Fprintln(tw, "\nDERIVATION\tSTORE\tLAST STATE\tLAST RUN\tCONFIRMED\tPENDING\tSKIPPED")
	if ds == nil {
		fmt.Fprintln(tw, "(none configured)")
	}
	for _, raw := range ds {
		var d rederive.JobInfo
		_ = json.Unmarshal(raw, &d)
		state := d.LastState
		if state == "" {
			state = "not run yet"
		}
		if d.Running {
			state += " (running)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", d.Name, d.Store, state, ago(d.LastRunAt, now), d.Confirmed, d.Pending, d.Skipped)
	}
}

func printChecks(tw io.Writer, cs []json.RawMessage, now time.Time) {
	fmt.Fprintln(tw, "\nCHECK\tSTATE\tLAST RESULT\tLAST SUCCESS\tFINDINGS\tLAST ERROR")
	if cs == nil {
		fmt.Fprintln(tw, "(none configured)")
	}
	for _, raw := range cs {
		var c checkers.Status
		_ = json.Unmarshal(raw, &c)
		result := "never ran"
		if c.LastRun != nil {
			result = c.LastRun.Result
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", c.Name, c.State, result, ago(c.LastSuccessAt, now), len(c.Findings), oneLine(c.LastError, 60))
	}
}

func printAlerts(tw io.Writer, as []json.RawMessage, now time.Time) {
	fmt.Fprintln(tw, "\nFIRING ALERT\tKIND\tSEVERITY\tSINCE\tSUMMARY")
	if as == nil {
		fmt.Fprintln(tw, "(alerts not enabled)")
	} else if len(as) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	for _, raw := range as {
		var a alert.Alert
		_ = json.Unmarshal(raw, &a)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.Kind, orDash(a.Labels["severity"]), ago(a.StartsAt, now), oneLine(a.Summary, 100))
	}
}

// ago is "3m ago" for t before now, "-" for the zero time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one line, cut at max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return orDash(s)
}

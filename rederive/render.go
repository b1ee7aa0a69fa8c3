package rederive

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/rederive/compare"
)

// WriteTable writes a readable summary of reports, one line per
// derivation, then the drifted keys.
func WriteTable(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DERIVATION\tSTATE\tEVENTS\tKEYS\tMATCHED\tMISSING\tEXTRA\tMISMATCH\tPENDING\tSECONDS")
	for _, r := range reports {
		state := r.State
		if r.State == StateError {
			state = "error (" + r.ErrorKind + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\n", r.Derivation, state, r.Events, r.Keys,
			r.Stats.Matched, r.Stats.Missing, r.Stats.Extra, r.Stats.Mismatched, r.Pending, r.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reports {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s: %s error: %s\n", r.Derivation, r.ErrorKind, r.Error)
		}
		if s := skipped(r); s != "" {
			fmt.Fprintf(w, "\n%s: %s\n", r.Derivation, s)
			for _, e := range r.Errors[:min(len(r.Errors), maxShownErrors)] {
				fmt.Fprintf(w, "  skipped %s#%d: %s\n", e.Log, e.Index, e.Err)
			}
		}
		if r.Waiting != "" && len(r.Drift) > 0 {
			fmt.Fprintf(w, "\n%s: pending: %s\n", r.Derivation, r.Waiting)
		}
		if r.State == StateNoSource {
			fmt.Fprintf(w, "\n%s: %s\n", r.Derivation, r.Waiting)
		}
		if len(r.Drift) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: %d confirmed, %d pending\n", r.Derivation, r.Confirmed, r.Pending)
		for _, d := range r.Drift {
			fmt.Fprintf(w, "  %-9s %-8s %s: %s\n", d.Status, d.Kind, d.Key, describe(d))
			for _, e := range d.Lineage {
				fmt.Fprintf(w, "            from %s#%d id %q leaf %s (proof in tree of size %d)\n", e.Log, e.Index, e.ID, e.LeafHash, e.TreeSize)
				if e.Why != "" {
					fmt.Fprintf(w, "              ^ %s\n", e.Why)
				}
			}
		}
	}
	return nil
}

// maxShownErrors bounds the skipped events a text or Markdown report lists
// (the JSON report has the first 100).
const maxShownErrors = 5

// skipped says how many events a run skipped on derivation errors, or ""
// if none: each such event is left out of the expected values, so the
// store is judged without it.
func skipped(r *Report) string {
	if r.DerivationErrors == 0 {
		return ""
	}
	return plural.N(r.DerivationErrors, "event", "events") + " skipped on derivation errors (their filter, key or step failed; the expected values leave them out)"
}

// describe says in a line what differs.
func describe(d DriftReport) string {
	switch d.Kind {
	case compare.DriftMissing:
		return "expected " + compact(d.Expected) + ", absent from the store"
	case compare.DriftExtra:
		return "store has " + compact(d.Actual) + ", nothing derives it"
	}
	var parts []string
	for _, f := range d.Fields {
		name := f.Field
		if name == "" {
			name = "value"
		}
		exp, act := compact(f.Expected), compact(f.Actual)
		if f.Absent == "expected" {
			exp = "(absent)"
		}
		if f.Absent == "actual" {
			act = "(absent)"
		}
		parts = append(parts, fmt.Sprintf("%s expected %s, store has %s", name, exp, act))
	}
	if len(parts) == 0 {
		return "expected " + compact(d.Expected) + ", store has " + compact(d.Actual)
	}
	return strings.Join(parts, "; ")
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// JUnit XML, as CI systems read it: one test suite, one test case per
// derivation; confirmed drift is a failure, a run in state error an error.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Name    string       `xml:"name,attr"`
	Tests   int          `xml:"tests,attr"`
	Fails   int          `xml:"failures,attr"`
	Errors  int          `xml:"errors,attr"`
	Time    junitSeconds `xml:"time,attr"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name   string       `xml:"name,attr"`
	Tests  int          `xml:"tests,attr"`
	Fails  int          `xml:"failures,attr"`
	Errors int          `xml:"errors,attr"`
	Time   junitSeconds `xml:"time,attr"`
	Cases  []junitCase  `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      junitSeconds  `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// junitSeconds is a duration in seconds written as a plain decimal
// ("0.000", never "4e-05"): JUnit's schema types time as xs:decimal.
type junitSeconds float64

func (s junitSeconds) MarshalXMLAttr(name xml.Name) (xml.Attr, error) {
	return xml.Attr{Name: name, Value: strconv.FormatFloat(float64(s), 'f', 3, 64)}, nil
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes reports as JUnit XML.
func WriteJUnit(w io.Writer, reports []*Report) error {
	s := junitSuite{Name: "auditd verify"}
	for _, r := range reports {
		c := junitCase{Name: r.Derivation, Classname: "auditd.derivations", Time: junitSeconds(r.Seconds)}
		var detail strings.Builder
		_ = WriteTable(&detail, []*Report{r})
		switch r.State {
		case StateDrift:
			c.Failure = &junitMessage{Type: "drift", Message: fmt.Sprintf("%s drifted (%d missing, %d extra, %d mismatched)",
				plural.N(r.Confirmed, "key", "keys"), r.Stats.Missing, r.Stats.Extra, r.Stats.Mismatched), Text: detail.String()}
			s.Fails++
		case StateError:
			c.Error = &junitMessage{Type: r.ErrorKind, Message: r.Error, Text: detail.String()}
			s.Errors++
		default:
			c.SystemOut = detail.String()
		}
		s.Tests++
		s.Time += junitSeconds(r.Seconds)
		s.Cases = append(s.Cases, c)
	}
	out := junitSuites{Name: "auditd", Tests: s.Tests, Fails: s.Fails, Errors: s.Errors, Time: s.Time, Suites: []junitSuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// WriteMarkdown writes reports as Markdown for a pull-request comment.
func WriteMarkdown(w io.Writer, reports []*Report) error {
	var b strings.Builder
	b.WriteString("## auditd verify\n\n| derivation | state | events | keys | missing | extra | mismatched | pending |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range reports {
		icon := map[string]string{StateClean: "✅ clean", StatePending: "⏳ pending", StateDrift: "❌ drift", StateError: "⚠️ error", StateNoSource: "⚠️ no source"}[r.State]
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d | %d | %d | %d |\n", r.Derivation, icon, r.Events, r.Keys,
			r.Stats.Missing, r.Stats.Extra, r.Stats.Mismatched, r.Pending)
	}
	for _, r := range reports {
		if r.State == StateError {
			fmt.Fprintf(&b, "\n### `%s`: %s error\n\n```\n%s\n```\n", r.Derivation, r.ErrorKind, r.Error)
		}
		if s := skipped(r); s != "" {
			fmt.Fprintf(&b, "\n⚠️ `%s`: %s.\n\n", r.Derivation, s)
			for _, e := range r.Errors[:min(len(r.Errors), maxShownErrors)] {
				fmt.Fprintf(&b, "- `%s#%d`: %s\n", e.Log, e.Index, mdEscape(e.Err))
			}
		}
		if r.Waiting != "" && len(r.Drift) > 0 {
			fmt.Fprintf(&b, "\n⏳ `%s`: %s\n", r.Derivation, mdEscape(r.Waiting))
		}
		if len(r.Drift) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### `%s`: %d confirmed, %d pending\n\n| status | kind | key | difference | evidence |\n|---|---|---|---|---|\n", r.Derivation, r.Confirmed, r.Pending)
		for _, d := range r.Drift {
			var ev []string
			for _, e := range d.Lineage {
				ev = append(ev, fmt.Sprintf("`%s#%d`", e.Log, e.Index))
			}
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", d.Status, d.Kind, mdEscape(d.Key), mdEscape(describe(d)), strings.Join(ev, " "))
		}
		if len(r.Pins) > 0 {
			b.WriteString("\nComputed at ")
			for i, p := range r.Pins {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "`%s` size %d", p.Log, p.Size)
			}
			b.WriteString(".\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "`", "'").Replace(s)
}

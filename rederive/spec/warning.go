package spec

import (
	"fmt"
	"strings"

	"github.com/auditd/auditd/rederive/celfold"
)

// Warning is something a spec's author should know that does not stop it
// from loading, placed like an Error. The caller logs it; auditd verify
// prints it.
type Warning Error

func (w *Warning) String() string { return (*Error)(w).Error() }

// Warnings returns the warnings of a spec: today, that a derivation reads
// several logs with a step that is not known to commute, so its result
// depends on the order the fold gives their events (docs/derivations.md,
// "Ordering").
func (s *Spec) Warnings() []*Warning {
	if s.Commutative || !severalLogs(s.Sources) {
		return nil
	}
	var out []*Warning
	const order = "across logs, a key's events are applied log by log in log-name order " +
		"(all of one log's events for the key, then the next log's), and an incremental run " +
		"applies each log's new events after all the old events of every log, " +
		"so the expected state can depend on that order rather than on the order of the events in the source system"
	const declare = "if no key takes events from two logs, or the result is the same in any order, declare commutative: true"
	if strings.TrimSpace(s.AllKeys) != "" {
		w := s.errAt("all_keys", "reads several logs (sources %s) and has all_keys events: %s; "+
			"an all_keys event (a truncate) in one log is ordered against the other logs' events the same way, not by time; %s",
			sourcesText(s.Sources), order, declare)
		out = append(out, (*Warning)(w))
	}
	if strings.TrimSpace(s.Step) != "" && !celfold.SumStep(s.Initial, s.Step) {
		w := s.errAt("step", "reads several logs (sources %s) and its step is not a recognised sum "+
			"(an int, uint or decimal state plus or minus terms that do not read state): %s; %s",
			sourcesText(s.Sources), order, declare)
		out = append(out, (*Warning)(w))
	}
	return out
}

// Warnings returns the warnings of specs, in order.
func Warnings(specs []*Spec) []*Warning {
	var out []*Warning
	for _, s := range specs {
		out = append(out, s.Warnings()...)
	}
	return out
}

// severalLogs reports whether sources may name more than one log: two
// entries, or a pattern.
func severalLogs(sources []string) bool {
	if len(sources) > 1 {
		return true
	}
	return len(sources) == 1 && strings.ContainsAny(sources[0], `*?[\`)
}

func sourcesText(sources []string) string {
	return fmt.Sprintf("[%s]", strings.Join(sources, ", "))
}

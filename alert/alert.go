// Package alert keeps auditd's alerts: confirmed drift, derivation and
// derived-store errors, and ledger integrity violations. A Manager persists
// each alert in the ledger's database, serves the current set to readers
// and subscribers (the HTTP API's JSON and server-sent events), and pushes
// every change to sinks such as Alertmanager-compatible webhooks.
//
// An alert is identified by an ID its raiser chooses ("drift/balances",
// "integrity/payments.0/offset_conflict"); raising the same ID again updates
// the alert instead of adding one. A raiser that re-checks a condition
// periodically calls [Manager.Sync] with what it still sees, and every alert
// it no longer reports resolves.
package alert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"
	"unicode"
	"unicode/utf8"
)

// Kind is what an alert is about.
type Kind string

// The kinds of alert.
const (
	KindDrift           Kind = "drift"            // a derived store disagrees with the re-derivation (confirmed)
	KindDerivationError Kind = "derivation_error" // a derivation failed to run
	KindStoreError      Kind = "store_error"      // a derived store could not be read
	KindIntegrity       Kind = "integrity"        // the ledger saw an integrity violation
	KindStorage         Kind = "storage"          // the ledger cannot write: its disk is nearly full, or a write failed
)

// Kinds lists every kind.
var Kinds = []Kind{KindDrift, KindDerivationError, KindStoreError, KindIntegrity, KindStorage}

// Valid reports whether k is one of [Kinds].
func (k Kind) Valid() bool {
	switch k {
	case KindDrift, KindDerivationError, KindStoreError, KindIntegrity, KindStorage:
		return true
	}
	return false
}

// AlertName is the Alertmanager "alertname" label of the kind's alerts:
// AuditdDrift, AuditdDerivationError, AuditdStoreError, AuditdIntegrity,
// AuditdStorage.
func (k Kind) AlertName() string {
	switch k {
	case KindDrift:
		return "AuditdDrift"
	case KindDerivationError:
		return "AuditdDerivationError"
	case KindStoreError:
		return "AuditdStoreError"
	case KindIntegrity:
		return "AuditdIntegrity"
	case KindStorage:
		return "AuditdStorage"
	}
	return "Auditd"
}

// The severities of an alert, the values of its "severity" label, which
// Alertmanager routes on.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
)

// ValidSeverity reports whether s is SeverityCritical, SeverityWarning or
// SeverityInfo.
func ValidSeverity(s string) bool {
	return s == SeverityCritical || s == SeverityWarning || s == SeverityInfo
}

// Severity is the severity of the kind's alerts whose raiser names none:
// critical for integrity and storage (the ledger's guarantees are at
// stake), warning for drift, derivation and store errors.
func (k Kind) Severity() string {
	switch k {
	case KindIntegrity, KindStorage:
		return SeverityCritical
	}
	return SeverityWarning
}

// State is whether an alert is firing.
type State string

// The states of an alert.
const (
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// Valid reports whether s is StateFiring or StateResolved.
func (s State) Valid() bool { return s == StateFiring || s == StateResolved }

// Alert is one alert. The raiser sets ID, Kind, Subject, Summary, Labels and
// Details; the Manager sets State, StartsAt, EndsAt, UpdatedAt and Seq.
type Alert struct {
	// ID is the alert's stable identity, chosen by the raiser, e.g.
	// "drift/balances" or "integrity/payments.0/offset_conflict". See
	// [ValidID].
	ID      string `json:"id"`
	Kind    Kind   `json:"kind"`
	State   State  `json:"state"`
	Subject string `json:"subject"` // the derivation or log the alert is about
	Summary string `json:"summary"` // one line for humans
	// Labels are extra low-cardinality labels (for example "team"), passed
	// on to sinks; at most [MaxLabels], names as in Prometheus. The names
	// alertname, kind, subject and id are reserved. Every stored alert has
	// a "severity" label, one of critical, warning and info: the Manager
	// sets [Kind.Severity] when the raiser gives none.
	Labels map[string]string `json:"labels,omitempty"`
	// Details is a JSON value with the evidence, e.g. the excerpt of a
	// drift report with lineage and proofs; at most [MaxDetailsBytes].
	Details json.RawMessage `json:"details,omitempty"`
	// StartsAt is when the alert last began firing.
	StartsAt time.Time `json:"starts_at"`
	// EndsAt is when a resolved alert resolved; nil while firing.
	EndsAt *time.Time `json:"ends_at,omitempty"`
	// UpdatedAt is the time of the last change.
	UpdatedAt time.Time `json:"updated_at"`
	// Seq increases with every change of any alert of the Manager; it is
	// the event id of server-sent events.
	Seq uint64 `json:"seq"`
}

// Limits on what a raiser may put in an alert.
const (
	MaxIDBytes         = 256
	MaxLabels          = 16
	MaxLabelValueBytes = 1024
	MaxSummaryBytes    = 4096
	MaxDetailsBytes    = 1 << 20
)

// ErrInvalid is wrapped by the errors of alerts that break the rules on
// their fields.
var ErrInvalid = errors.New("alert: invalid alert")

// reservedLabels are the labels sinks derive from the alert itself.
var reservedLabels = map[string]bool{"alertname": true, "kind": true, "subject": true, "id": true}

// ValidID reports whether id can identify an alert: 1 to [MaxIDBytes] bytes
// of UTF-8 without spaces or control characters, not starting or ending
// with "/", and not "stream" (the HTTP API's event stream).
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDBytes || !utf8.ValidString(id) || id == "stream" ||
		id[0] == '/' || id[len(id)-1] == '/' {
		return false
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// validLabelName reports whether n is a Prometheus label name not reserved
// for internal use: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
func validLabelName(n string) bool {
	if n == "" || len(n) > 128 || (len(n) >= 2 && n[:2] == "__") {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (i > 0 && '0' <= c && c <= '9') {
			continue
		}
		return false
	}
	return true
}

// check validates the raiser's fields of a.
func (a *Alert) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalid, a.ID, fmt.Sprintf(format, args...))
	}
	if !ValidID(a.ID) {
		return bad("bad id")
	}
	if !a.Kind.Valid() {
		return bad("unknown kind %q", a.Kind)
	}
	if a.Subject == "" || len(a.Subject) > MaxLabelValueBytes || !utf8.ValidString(a.Subject) {
		return bad("subject must be 1..%d bytes of UTF-8", MaxLabelValueBytes)
	}
	if len(a.Summary) > MaxSummaryBytes || !utf8.ValidString(a.Summary) {
		return bad("summary must be at most %d bytes of UTF-8", MaxSummaryBytes)
	}
	if len(a.Labels) > MaxLabels {
		return bad("%d labels, at most %d", len(a.Labels), MaxLabels)
	}
	for k, v := range a.Labels {
		if !validLabelName(k) || reservedLabels[k] {
			return bad("label name %q is invalid or reserved", k)
		}
		if len(v) > MaxLabelValueBytes || !utf8.ValidString(v) {
			return bad("label %s: value must be at most %d bytes of UTF-8", k, MaxLabelValueBytes)
		}
		if k == "severity" && v != "" && !ValidSeverity(v) {
			return bad("severity %q: want critical, warning or info", v)
		}
	}
	if len(a.Details) > MaxDetailsBytes {
		return bad("details of %d bytes, at most %d", len(a.Details), MaxDetailsBytes)
	}
	if len(a.Details) > 0 && !json.Valid(a.Details) {
		return bad("details are not valid JSON")
	}
	return nil
}

// clone returns a copy of a sharing no memory with it.
func (a Alert) clone() Alert {
	if a.Labels != nil {
		a.Labels = maps.Clone(a.Labels)
	}
	if a.Details != nil {
		a.Details = bytes.Clone(a.Details)
	}
	if a.EndsAt != nil {
		t := *a.EndsAt
		a.EndsAt = &t
	}
	return a
}

// sameContent reports whether a and b carry the same summary, labels and
// details.
func sameContent(a, b *Alert) bool {
	return a.Summary == b.Summary && maps.Equal(a.Labels, b.Labels) && bytes.Equal(a.Details, b.Details)
}

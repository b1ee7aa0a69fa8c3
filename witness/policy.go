package witness

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// ErrPolicy reports a checkpoint without the cosignatures a policy asks
// for.
var ErrPolicy = errors.New("witness: policy not met")

// Policy is the verifying side's witness policy: at least Threshold of
// Verifiers (cosignature/v1 keys) must have cosigned a checkpoint.
type Policy struct {
	Verifiers []note.Verifier
	Threshold int
}

// NewPolicy parses the witnesses' verifier keys. A threshold of 0 means
// all of them.
func NewPolicy(threshold int, vkeys ...string) (Policy, error) {
	p := Policy{Threshold: threshold}
	for _, k := range vkeys {
		v, err := NewVerifier(k)
		if err != nil {
			return Policy{}, err
		}
		p.Verifiers = append(p.Verifiers, v)
	}
	if p.Threshold == 0 {
		p.Threshold = len(p.Verifiers)
	}
	if p.Threshold < 0 || p.Threshold > len(p.Verifiers) {
		return Policy{}, fmt.Errorf("witness: threshold %d of %d witnesses", threshold, len(p.Verifiers))
	}
	return p, nil
}

// Check verifies the cosignatures on a signed checkpoint and returns the
// names of the witnesses whose cosignatures verify, or an error wrapping
// ErrPolicy when fewer than Threshold do. A cosignature line that names a
// policy key but does not verify is an error, even beside a good line of
// the same key (merkle.OpenNote). The log's own signature is checked
// separately (merkle.OpenCheckpoint); unknown lines are ignored.
func (p Policy) Check(signed []byte) ([]string, error) {
	if p.Threshold <= 0 {
		return nil, nil
	}
	n, err := merkle.OpenNote(signed, note.VerifierList(p.Verifiers...))
	var unverified *note.UnverifiedNoteError
	switch {
	case errors.As(err, &unverified):
		return nil, fmt.Errorf("%w: no cosignature from the %d witnesses (%s), %d needed", ErrPolicy, len(p.Verifiers), p.names(), p.Threshold)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, s := range n.Sigs {
		id := fmt.Sprintf("%s+%08x", s.Name, s.Hash)
		if !seen[id] {
			seen[id] = true
			names = append(names, s.Name)
		}
	}
	if len(names) < p.Threshold {
		return names, fmt.Errorf("%w: %d of the %d witnesses cosigned (%v), %d needed", ErrPolicy, len(names), len(p.Verifiers), names, p.Threshold)
	}
	return names, nil
}

// names lists the policy's witnesses, for an error.
func (p Policy) names() string {
	var out []string
	for _, v := range p.Verifiers {
		out = append(out, v.Name())
	}
	return strings.Join(out, ", ")
}

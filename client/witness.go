package client

import (
	"github.com/auditd/auditd/witness"
)

// WithWitnessPolicy makes Checkpoint fail with ErrVerification unless the
// checkpoint carries cosignatures of at least p.Threshold of p's witnesses
// (docs/witness.md). Build p with witness.NewPolicy.
func WithWitnessPolicy(p witness.Policy) Option {
	return func(c *Client) { c.policy = &p }
}

// CheckWitnesses checks a signed checkpoint against the client's witness
// policy (none: nil).
func (c *Client) CheckWitnesses(signed []byte, log string) error {
	return c.checkWitnesses(signed, log)
}

func (c *Client) checkWitnesses(signed []byte, log string) error {
	if c.policy == nil {
		return nil
	}
	if _, err := c.policy.Check(signed); err != nil {
		return verifyErr("checkpoint of %s: %v", log, err)
	}
	return nil
}

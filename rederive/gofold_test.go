package rederive

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// goBalances is a derivation written in Go for the engine's tests: account
// balances from JSON events
//
//	{"type": "payment", "account": "a1", "amount": 5}
//	{"type": "transfer", "from": "a1", "to": "a2", "amount": 3}
//
// keyed by account (a transfer by [from, to]). Events of other types do not
// apply; a payload that is not JSON fails to prepare; "fail": true fails
// the step of every key.
//
// With ordered set, each state also carries a digest of the entries applied
// to it in order, so a state tells whether its entries were applied in the
// same order.
type goBalances struct {
	name    string
	ordered bool
	// hook, if set, runs at the start of Prepare (tests cancel or slow
	// the fold from it).
	hook func(ev *Event)
}

var _ Derivation = (*goBalances)(nil)

type goEvent struct {
	Type    string `json:"type"`
	Account string `json:"account"`
	From    string `json:"from"`
	To      string `json:"to"`
	Amount  int64  `json:"amount"`
	Fail    bool   `json:"fail"`
}

type goBalance struct {
	Sum    int64
	Count  int64
	Digest uint64
}

func (d *goBalances) Name() string {
	if d.name == "" {
		return "balances"
	}
	return d.name
}

func (d *goBalances) Sources() []string { return []string{"*"} }

func (d *goBalances) Prepare(ev *Event) ([]string, any, error) {
	if d.hook != nil {
		d.hook(ev)
	}
	p := new(goEvent)
	if err := json.Unmarshal(ev.Payload, p); err != nil {
		return nil, nil, err
	}
	switch p.Type {
	case "payment":
		return []string{p.Account}, p, nil
	case "transfer":
		if p.From == p.To {
			return []string{p.From}, p, nil
		}
		return []string{p.From, p.To}, p, nil
	}
	return nil, nil, nil
}

func (d *goBalances) Initial(string) (State, error) { return goBalance{}, nil }

func (d *goBalances) Step(s State, dec any, ev *Event, key string) (State, error) {
	b, p := s.(goBalance), dec.(*goEvent)
	if p.Fail {
		return nil, errors.New("step refused")
	}
	switch {
	case p.Type == "payment":
		b.Sum += p.Amount
	case p.From == p.To:
	case key == p.From:
		b.Sum -= p.Amount
	case key == p.To:
		b.Sum += p.Amount
	}
	b.Count++
	if d.ordered {
		const prime = 1099511628211
		h := b.Digest
		for i := 0; i < len(ev.Log); i++ {
			h = (h ^ uint64(ev.Log[i])) * prime
		}
		b.Digest = (h ^ ev.Index) * prime
	}
	return b, nil
}

func (d *goBalances) Export(s State) (any, error) {
	b := s.(goBalance)
	return map[string]any{"sum": b.Sum, "count": b.Count}, nil
}

func (d *goBalances) Encode(s State) ([]byte, error) {
	b, ok := s.(goBalance)
	if !ok {
		return nil, fmt.Errorf("state is %T", s)
	}
	out := binary.AppendVarint(nil, b.Sum)
	out = binary.AppendVarint(out, b.Count)
	return binary.AppendUvarint(out, b.Digest), nil
}

func (d *goBalances) Decode(v []byte) (State, error) {
	var b goBalance
	var k int
	for _, f := range []*int64{&b.Sum, &b.Count} {
		if *f, k = binary.Varint(v); k <= 0 {
			return nil, errors.New("corrupt balance")
		}
		v = v[k:]
	}
	if b.Digest, k = binary.Uvarint(v); k <= 0 || k != len(v) {
		return nil, errors.New("corrupt balance")
	}
	return b, nil
}

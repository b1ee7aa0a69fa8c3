package fold

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// GoBalances is a derivation written in Go for the engine's tests: account
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
// to it (log, index, time, payload) in order, so a state tells whether its
// entries were applied in the same order.
type GoBalances struct {
	name    string
	ordered bool
	// hook, if set, runs at the start of Prepare (tests cancel or slow
	// the fold from it).
	hook func(ev *Event)
}

var _ Derivation = (*GoBalances)(nil)

type goEvent struct {
	Type    string `json:"type"`
	Account string `json:"account"`
	From    string `json:"from"`
	To      string `json:"to"`
	Amount  int64  `json:"amount"`
	Fail    bool   `json:"fail"`
}

// scan decodes a flat JSON object whose strings hold no escapes, without
// reflection, so that benchmarks measure the engine rather than
// encoding/json. It reports false for anything else (the caller then uses
// encoding/json).
func (p *goEvent) scan(b []byte) bool {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	str := func() ([]byte, bool) {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' || b[j] < 0x20 || b[j] >= 0x80 {
				return nil, false
			}
			j++
		}
		if j == len(b) {
			return nil, false
		}
		s := b[i+1 : j]
		i = j + 1
		return s, true
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i++
	for first := true; ; first = false {
		ws()
		if i < len(b) && b[i] == '}' && first {
			i++
			break
		}
		name, ok := str()
		if !ok {
			return false
		}
		ws()
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i++
		ws()
		if i >= len(b) {
			return false
		}
		var field string
		switch string(name) {
		case "type", "account", "from", "to", "amount", "fail":
			field = string(name)
		default:
			// encoding/json matches field names without regard to case.
			for _, f := range []string{"type", "account", "from", "to", "amount", "fail"} {
				if bytes.EqualFold(name, []byte(f)) {
					return false
				}
			}
		}
		switch c := b[i]; {
		case c == '"':
			v, ok := str()
			if !ok {
				return false
			}
			switch field {
			case "type":
				p.Type = string(v)
			case "account":
				p.Account = string(v)
			case "from":
				p.From = string(v)
			case "to":
				p.To = string(v)
			case "amount", "fail":
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			j := i
			if c == '-' {
				j++
			}
			d := j
			var n int64
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				n = n*10 + int64(b[j]-'0')
			}
			switch {
			case j == d || j-d > 18 || b[d] == '0' && j-d > 1:
				return false
			case j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E'):
				return false
			case field != "" && field != "amount":
				return false
			}
			if c == '-' {
				n = -n
			}
			if field == "amount" {
				p.Amount = n
			}
			i = j
		case bytes.HasPrefix(b[i:], []byte("true")), bytes.HasPrefix(b[i:], []byte("false")):
			if field != "" && field != "fail" {
				return false
			}
			v := c == 't'
			if field == "fail" {
				p.Fail = v
			}
			i += 5
			if v {
				i--
			}
		case c == '[' && field == "":
			// A list of strings.
			i++
			for ws(); i < len(b) && b[i] != ']'; ws() {
				if _, ok := str(); !ok {
					return false
				}
				if ws(); i < len(b) && b[i] == ',' {
					i++
					if ws(); i < len(b) && b[i] == ']' {
						return false
					}
				} else if i < len(b) && b[i] != ']' {
					return false
				}
			}
			if i >= len(b) {
				return false
			}
			i++
		default:
			return false
		}
		ws()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		return false
	}
	ws()
	return i == len(b)
}

type GoBalance struct {
	Sum    int64
	Count  int64
	Digest uint64
}

func (d *GoBalances) Name() string {
	if d.name == "" {
		return "balances"
	}
	return d.name
}

func (d *GoBalances) Sources() []string { return []string{"*"} }

func (d *GoBalances) Prepare(ev *Event) ([]string, any, error) {
	if d.hook != nil {
		d.hook(ev)
	}
	p := new(goEvent)
	if !p.scan(ev.Payload) {
		*p = goEvent{}
		if err := json.Unmarshal(ev.Payload, p); err != nil {
			return nil, nil, err
		}
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

func (d *GoBalances) Initial(string) (State, error) { return GoBalance{}, nil }

func (d *GoBalances) Step(s State, dec any, ev *Event, key string) (State, error) {
	b, p := s.(GoBalance), dec.(*goEvent)
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
		// The entry as Step sees it, so that a state tells whether the
		// engine handed Step the entry's own bytes.
		for _, c := range ev.Payload {
			h = (h ^ uint64(c)) * prime
		}
		h = (h ^ uint64(ev.Time.UnixNano())) * prime
		b.Digest = (h ^ ev.Index) * prime
	}
	return b, nil
}

func (d *GoBalances) Export(s State) (any, error) {
	b := s.(GoBalance)
	return map[string]any{"sum": b.Sum, "count": b.Count}, nil
}

func (d *GoBalances) Encode(s State) ([]byte, error) {
	b, ok := s.(GoBalance)
	if !ok {
		return nil, fmt.Errorf("state is %T", s)
	}
	out := binary.AppendVarint(nil, b.Sum)
	out = binary.AppendVarint(out, b.Count)
	return binary.AppendUvarint(out, b.Digest), nil
}

func (d *GoBalances) Decode(v []byte) (State, error) {
	var b GoBalance
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

// FuzzFoldGoEvent checks goEvent.scan against encoding/json: whatever scan
// accepts, encoding/json decodes to the same event.
func FuzzFoldGoEvent(f *testing.F) {
	g := newFoldGen(1, 10)
	g.bad, g.fail = 0.1, 0.1
	for range 50 {
		f.Add(g.payload())
	}
	for _, s := range []string{`{}`, ` { "amount" : -12 , "tags": [ "x" , "y" ] } `, `{"amount": 1.5}`, `{"type": "a\"b"}`,
		`{"fail": true, "to": "x",}`, `{"a": [1]}`, `{"amount": 12345678901234567890}`, `[]`, `{"fail": false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p goEvent
		if !p.scan(b) {
			return
		}
		var q goEvent
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("scan accepted %q, encoding/json: %v", b, err)
		}
		if p != q {
			t.Fatalf("scan %q: %+v, encoding/json %+v", b, p, q)
		}
	})
}

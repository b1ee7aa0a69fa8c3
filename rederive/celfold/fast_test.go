package celfold

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
)

// fastCases are derivations the plan covers in part or in whole: native
// filters, keys and steps, and CEL over the fields' object.
var fastCases = []struct {
	name   string
	fields string
	// native: what the plan runs without CEL ("fks": filter, key, step).
	native string
}{
	{"sum", "key: event.account\ninitial: \"0\"\nstep: state + event.amount", "ks"},
	{"sum-right", "key: event.account\ninitial: \"0\"\nstep: event.amount + state", "ks"},
	{"sub", "key: event.account\ninitial: \"0\"\nstep: state - event.amount", "ks"},
	{"sum-double", "key: event.account\ninitial: \"0.0\"\nstep: state + event.amount", "ks"},
	{"count", "key: event.account\ninitial: \"0\"\nstep: state + 1", "ks"},
	{"count-double", "key: event.account\ninitial: \"0.5\"\nstep: state - 1.5", "ks"},
	{"near-max", "key: event.account\ninitial: \"9223372036854775000\"\nstep: state + event.amount", "ks"},
	{"near-min", "key: event.account\ninitial: \"-9223372036854775000\"\nstep: state - event.amount", "ks"},
	{"mixed-initial", "key: event.account\ninitial: 'key.startsWith(\"a\") ? dyn(0) : dyn(0.0)'\nstep: state + event.amount", "ks"},
	{"filter", "filter: event.type == \"payment\"\nkey: event.account\ninitial: \"0\"\nstep: state + event.amount", "fks"},
	{"filter-not", "filter: '\"refund\" != event.type'\nkey: event.account\ninitial: \"0\"\nstep: state + event.amount", "fks"},
	{"filter-cel", "filter: has(event.amount) && event.amount > 10\nkey: event.account\ninitial: \"0\"\nstep: state + event.amount", "ks"},
	{"concat", "key: event.account\ninitial: \"''\"\nstep: state + event.memo", "ks"},
	{"list", "key: event.account\ninitial: \"[]\"\nstep: state + [event.amount]", "k"},
	{"transfers", "key: '[event.from, event.to]'\ninitial: \"0\"\nstep: 'key == event.from ? state - event.amount : state + event.amount'", ""},
	{"meta", "key: event.account\ninitial: \"0\"\nstep: state + meta.index + event.amount", "k"},
	{"key-cel", "key: 'event.account + \"/\" + event.type'\ninitial: \"0\"\nstep: state + event.amount", "s"},
	{"has-map", "key: event.account\ninitial: '{}'\nstep: 'has(event.memo) ? {\"m\": event.memo, \"n\": event.amount} : state'", "k"},
}

func TestFastPlan(t *testing.T) {
	for _, c := range fastCases {
		d := celSpec(t, c.fields).(*celDerivation)
		p := d.plan
		if p == nil {
			t.Errorf("%s: no plan", c.name)
			continue
		}
		got := ""
		if p.filter != nil {
			got += "f"
		}
		if p.key >= 0 {
			got += "k"
		}
		if p.step != nil {
			got += "s"
		}
		if got != c.native {
			t.Errorf("%s: native %q, want %q (fields %q)", c.name, got, c.native, p.fields)
		}
	}
	// Expressions that read the event otherwise have no plan.
	for _, fields := range []string{
		"key: event.account\ninitial: \"0\"\nstep: state + size(event)",
		"key: 'event[\"account\"]'\ninitial: \"0\"\nstep: state + 1",
		"key: event.account\ninitial: \"0\"\nstep: 'state + event.?amount.orValue(0)'",
		"key: event.account\ninitial: \"0\"\nstep: '[1].map(event, event + state)[0]'",
		"key: event.account\ninitial: \"0\"\nstep: 'cel.bind(event, 2, event + state)'",
		"key: event.a\ninitial: \"0\"\nstep: state + event.b + event.c + event.d + event.e",
		"decode: raw\nkey: string(event)\ninitial: \"0\"\nstep: state + 1",
	} {
		if d := celSpec(t, fields).(*celDerivation); d.plan != nil {
			t.Errorf("%q: a plan over %q", fields, d.plan.fields)
		}
	}
}

// fastPayload returns a random payload: mostly objects of the fields the
// cases read, with values of every JSON kind and odd texts, sometimes
// invalid JSON or not an object.
func fastPayload(r *rand.Rand) string {
	switch r.IntN(40) {
	case 0:
		return `[1,2]`
	case 1:
		return strconv.Itoa(r.IntN(100))
	case 2:
		return `{"account":"a1","amount":1` // truncated
	case 3:
		return `{"account":"a1","amount":1} x`
	case 4:
		return ""
	case 5:
		return `{"account":"a1","amount":1e400}`
	}
	names := []string{"account", "amount", "type", "memo", "from", "to", "other", "ünï", `amo\u0075nt`, `acc\u006funt`, "Amount"}
	var b strings.Builder
	b.WriteString(ws(r) + "{")
	n := r.IntN(7)
	for i := range n {
		if i > 0 {
			b.WriteString(ws(r) + ",")
		}
		name := names[r.IntN(len(names))]
		if r.IntN(3) > 0 { // the fields that matter, more often
			name = names[r.IntN(6)]
		}
		fmt.Fprintf(&b, `%s"%s"%s:%s%s`, ws(r), name, ws(r), ws(r), fastValue(r, name, 0))
	}
	b.WriteString(ws(r) + "}" + ws(r))
	return b.String()
}

func ws(r *rand.Rand) string { return []string{"", "", "", " ", "\n\t "}[r.IntN(5)] }

func fastValue(r *rand.Rand, name string, depth int) string {
	k := r.IntN(24)
	if name == "account" || name == "from" || name == "to" {
		if k < 16 {
			return strconv.Quote([]string{"a1", "a2", "b1", "é", "a1"}[r.IntN(5)])
		}
	} else if name == "amount" && k < 12 {
		k = 12 + r.IntN(6) // numbers, mostly
	} else if name == "type" && k < 16 {
		return []string{`"payment"`, `"refund"`, `"pay\u006dent"`}[r.IntN(3)]
	}
	switch k {
	case 0, 1:
		return `null`
	case 2:
		return `true`
	case 3:
		return `false`
	case 4:
		return `"plain"`
	case 5:
		return `"\u00e9\n\ud83d\ude00\ud800"`
	case 6:
		return "\"\xff bytes\""
	case 7:
		return `"12"`
	case 8:
		if depth < 3 {
			return `{"amount":` + fastValue(r, "amount", depth+1) + `,"account":"a1"}`
		}
		return `{}`
	case 9:
		if depth < 3 {
			return `[` + fastValue(r, "amount", depth+1) + `,"a1"]`
		}
		return `[]`
	case 10:
		return `"a1"`
	case 11:
		return `-0`
	case 12, 13, 14:
		return strconv.Itoa(r.IntN(2000) - 500)
	case 15:
		return []string{"9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "4611686018427387904", "123456789012345678901234567890"}[r.IntN(6)]
	case 16:
		return strconv.FormatFloat(r.NormFloat64()*1e3, 'g', -1, 64)
	case 17:
		return []string{"1.5", "1e2", "1E-2", "0.0", "2.5e10", "-0.0"}[r.IntN(6)]
	}
	return strconv.Quote(fmt.Sprint("s", r.IntN(3)))
}

// fastFold folds payloads with d, reporting every outcome as text: each
// event's keys or error, each step's error, and the states' exact
// encodings at the end.
func fastFold(t *testing.T, d *celDerivation, payloads []string) []string {
	t.Helper()
	var out []string
	states := map[string]fold.State{}
	for i, p := range payloads {
		ev := &fold.Event{Log: "l", Index: uint64(i), ID: fmt.Sprint("e", i), Time: time.Unix(int64(i), 0), Payload: []byte(p),
			Source: &merkle.Source{Topic: "t", Partition: 1, Offset: int64(i)}}
		keys, dec, err := d.Prepare(ev)
		out = append(out, fmt.Sprintf("%d prepare %q %v", i, keys, err))
		for _, k := range keys {
			st, ok := states[k]
			if !ok {
				if st, err = d.Initial(k); err != nil {
					out = append(out, fmt.Sprintf("%d %s initial %v", i, k, err))
					continue
				}
			}
			next, err := d.Step(st, dec, ev, k)
			if err != nil {
				out = append(out, fmt.Sprintf("%d %s step %v", i, k, err))
				continue
			}
			states[k] = next
		}
	}
	for k, s := range states {
		enc, err := d.Encode(s)
		out = append(out, fmt.Sprintf("state %s %x %v", k, enc, err))
	}
	return out
}

// TestFastPathDifferential folds random payloads, odd ones included, with
// each case's plan and without it (the general path), and requires the
// same keys, the same errors and the same states, types included.
func TestFastPathDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fastPayload(r)
	}
	for _, c := range fastCases {
		t.Run(c.name, func(t *testing.T) {
			fast := celSpec(t, c.fields).(*celDerivation)
			general := celSpec(t, c.fields).(*celDerivation)
			general.plan = nil
			if fast.plan == nil {
				t.Fatal("no plan")
			}
			fastPrepared := 0
			for _, p := range payloads {
				if _, dec, _ := fast.Prepare(&fold.Event{Payload: []byte(p)}); dec != nil {
					if _, ok := dec.(*fastEvent); ok {
						fastPrepared++
					}
				}
			}
			if fastPrepared < n/25 {
				t.Fatalf("the fast path prepared %d of %d events", fastPrepared, n)
			}
			got, want := fastFold(t, fast, payloads), fastFold(t, general, payloads)
			sortTail(got, n)
			sortTail(want, n)
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("fast path:\n%s\ngeneral path:\n%s", got[i], want[i])
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d outcomes, want %d", len(got), len(want))
			}
		})
	}
}

// sortTail sorts the state lines, which follow the events' lines in map
// order.
func sortTail(lines []string, _ int) {
	i := len(lines)
	for i > 0 && strings.HasPrefix(lines[i-1], "state ") {
		i--
	}
	tail := lines[i:]
	for a := 1; a < len(tail); a++ {
		for b := a; b > 0 && tail[b] < tail[b-1]; b-- {
			tail[b], tail[b-1] = tail[b-1], tail[b]
		}
	}
}

// FuzzFastPath checks the fast path against the general one on one
// payload folded twice (over the state of the first) for each case.
func FuzzFastPath(f *testing.F) {
	for _, s := range []string{
		`{"account":"a1","amount":5,"type":"payment"}`, `{"account":"a1","amount":9223372036854775807}`,
		`{"account":"\u00e9","amount":1.5,"amount":2}`, `{"account":["a1"],"memo":{"x":1}}`, "{\"account\":\"\xff\"}",
		`{"acc\u006funt":"a1","amount":-0}`, `[]`, `{"account":"a1"`,
	} {
		f.Add([]byte(s))
	}
	ds := make([][2]*celDerivation, len(fastCases))
	for i, c := range fastCases {
		ds[i][0] = celSpec(f, c.fields).(*celDerivation)
		ds[i][1] = celSpec(f, c.fields).(*celDerivation)
		ds[i][1].plan = nil
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, d := range ds {
			got := fastFold(t, d[0], []string{string(data), string(data)})
			want := fastFold(t, d[1], []string{string(data), string(data)})
			sortTail(got, 2)
			sortTail(want, 2)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%s: %q:\nfast:\n%s\ngeneral:\n%s", fastCases[i].name, data, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	})
}

// TestFastPathKeepsNoPayload checks that the fast path copies what it
// keeps: the engine may reuse a payload's buffer once Prepare returns.
func TestFastPathKeepsNoPayload(t *testing.T) {
	d := celSpec(t, fastCases[0].fields).(*celDerivation)
	p := []byte(`{"account":"a1","amount":5}`)
	ev := &fold.Event{Payload: p}
	keys, dec, err := d.Prepare(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dec.(*fastEvent); !ok {
		t.Fatalf("prepared by %T, not the fast path", dec)
	}
	copy(p, bytes.Repeat([]byte("x"), len(p)))
	st, _ := d.Initial(keys[0])
	st, err = d.Step(st, dec, ev, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if keys[0] != "a1" || fmt.Sprint(st) != "5" {
		t.Fatalf("after the payload changed: key %q, state %v", keys[0], st)
	}
}

package celfold

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/fold"
)

const benchSumByKeySpec = `
derivations:
  - name: balances
    sources: [payments.*]
    filter: event.type == "transfer"
    key: '[event.from, event.to]'
    initial: "0"
    step: 'key == event.from ? state - event.amount : state + event.amount'
    store:
      file: {path: balances.jsonl}
`

// benchAccounts is the number of accounts benchmark payments move money
// between: the fold keeps a state per account, as the engine would.
const benchAccounts = 100_000

// benchPayments returns n realistic ~200-byte payment events.
func benchPayments(n int) []*fold.Event {
	evs := make([]*fold.Event, n)
	for i := range evs {
		p := fmt.Sprintf(`{"id":"pay-%08d","type":"transfer","from":"acct-%06d","to":"acct-%06d","amount":%d,"currency":"EUR","memo":"invoice %d settlement","created":"2025-03-01T12:%02d:00Z","tags":["sepa","batch-7"]}`,
			i, (i*7919)%benchAccounts, (i*104729+3)%benchAccounts, 100+i%9000, i, i%60)
		evs[i] = &fold.Event{Log: "payments.0", Index: uint64(i), ID: fmt.Sprintf("pay-%08d", i), Time: time.Unix(1_700_000_000+int64(i), 0), Payload: []byte(p)}
	}
	return evs
}

func benchDerivation(b *testing.B, yaml string) fold.Derivation {
	b.Helper()
	return compileYAML(b, yaml)
}

// BenchmarkCELSumByKey measures Prepare and Step (filter, key, a step per
// key) of a sum-by-key derivation over ~200-byte JSON payments between
// 100,000 accounts, states kept in a map as the engine does.
func BenchmarkCELSumByKey(b *testing.B) {
	d := benchDerivation(b, benchSumByKeySpec)
	evs := benchPayments(2 * benchAccounts)
	b.SetBytes(int64(len(evs[0].Payload)))
	b.Run("serial", func(b *testing.B) {
		states := make(map[string]fold.State)
		b.ReportAllocs()
		i := 0
		cpu := processCPU()
		for b.Loop() {
			ev := evs[i%len(evs)]
			i++
			if err := benchApply(d, states, ev); err != nil {
				b.Fatal(err)
			}
		}
		// CPU time (GC included) is steadier than wall time on a busy
		// machine.
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			states := make(map[string]fold.State)
			i := 0
			for pb.Next() {
				ev := evs[i%len(evs)]
				i++
				if err := benchApply(d, states, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchDeriveSpec is the derivation of auditd-bench derive: a sum of
// amounts by account, without a filter.
const benchDeriveSpec = `
derivations:
  - name: balances
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + event.amount
    store:
      file: {path: balances.jsonl}
`

// BenchmarkCELSum measures Prepare and Step of auditd-bench derive's
// sum by account over ~200-byte payments, with the fast path (the plan)
// and without it (general).
func BenchmarkCELSum(b *testing.B) {
	evs := make([]*fold.Event, 2*benchAccounts)
	for i := range evs {
		p := fmt.Sprintf(`{"id":"e-%d","type":"payment","account":"acct-%06d","amount":%d,"currency":"EUR","memo":"%0120d"}`,
			i, (i*7919)%benchAccounts, 1+(i*31)%99_999, i)
		evs[i] = &fold.Event{Log: "payments", Index: uint64(i), ID: fmt.Sprint("e-", i), Time: time.Unix(1_700_000_000+int64(i), 0), Payload: []byte(p)}
	}
	for _, c := range []struct {
		name string
		plan bool
	}{{"fast", true}, {"general", false}} {
		b.Run(c.name, func(b *testing.B) {
			d := benchDerivation(b, benchDeriveSpec).(*celDerivation)
			if d.plan == nil {
				b.Fatal("no plan")
			}
			if !c.plan {
				d.plan = nil
			}
			b.SetBytes(int64(len(evs[0].Payload)))
			states := make(map[string]fold.State)
			b.ReportAllocs()
			i := 0
			cpu := processCPU()
			for b.Loop() {
				ev := evs[i%len(evs)]
				i++
				if err := benchApply(d, states, ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkCELDecimalSum measures the sum by account of BenchmarkCELSum
// with decimal states: the cost of exact decimals over ints.
func BenchmarkCELDecimalSum(b *testing.B) {
	evs := make([]*fold.Event, 2*benchAccounts)
	for i := range evs {
		p := fmt.Sprintf(`{"id":"e-%d","type":"payment","account":"acct-%06d","amount":"%d.%02d","currency":"EUR","memo":"%0120d"}`,
			i, (i*7919)%benchAccounts, 1+(i*31)%99_999, i%100, i)
		evs[i] = &fold.Event{Log: "payments", Index: uint64(i), ID: fmt.Sprint("e-", i), Time: time.Unix(1_700_000_000+int64(i), 0), Payload: []byte(p)}
	}
	d := benchDerivation(b, `
derivations:
  - name: balances
    sources: [payments]
    key: event.account
    initial: 'decimal("0.00")'
    step: state + decimal(event.amount)
    store:
      file: {path: balances.jsonl}
`)
	b.SetBytes(int64(len(evs[0].Payload)))
	states := make(map[string]fold.State)
	b.ReportAllocs()
	i := 0
	cpu := processCPU()
	for b.Loop() {
		ev := evs[i%len(evs)]
		i++
		if err := benchApply(d, states, ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time the process has used, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchApply(d fold.Derivation, states map[string]fold.State, ev *fold.Event) error {
	keys, dec, err := d.Prepare(ev)
	if err != nil {
		return err
	}
	for _, k := range keys {
		st, ok := states[k]
		if !ok {
			if st, err = d.Initial(k); err != nil {
				return err
			}
		}
		if st, err = d.Step(st, dec, ev, k); err != nil {
			return err
		}
		states[k] = st
	}
	return nil
}

// BenchmarkCELDecodeJSON measures decoding a payment payload alone.
func BenchmarkCELDecodeJSON(b *testing.B) {
	evs := benchPayments(1)
	b.SetBytes(int64(len(evs[0].Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEventJSON(evs[0].Payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCELEncodeState measures Encode and Decode of a map state.
func BenchmarkCELEncodeState(b *testing.B) {
	d := benchDerivation(b, benchSumByKeySpec)
	st, err := decodeEventJSON(benchPayments(1)[0].Payload)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		enc, err := d.Encode(st)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

package rederive

import (
	"fmt"
	"testing"

	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
	"github.com/auditd/auditd/rederive/store"
)

// BenchmarkSnapshot makes (encode, hash, sign) and opens (verify, hash,
// decode) a snapshot of 100,000 keys, each with its newest entry.
func BenchmarkSnapshot(b *testing.B) {
	job := rtJob(b, rtSpec("balances", store.Config{File: &store.FileConfig{Path: "unused.jsonl"}}))
	d, fp := job.Derivation, spec.Fingerprint(job.Spec)
	signer, verifier := testSnapshotKey(b, "snapshot-bench.example")
	const keys = 100_000
	r := &fold.Result{Derivation: "balances", Fingerprint: fp, Pins: []fold.Pin{{Log: "payments", Size: keys}},
		States: make(map[string]fold.State, keys), Newest: make(map[string]fold.EventRef, keys), Events: keys}
	for i := range keys {
		k := fmt.Sprintf("acct-%06d", i)
		st, err := d.Initial(k)
		if err != nil {
			b.Fatal(err)
		}
		r.States[k] = st
		r.Newest[k] = fold.EventRef{Log: "payments", Index: uint64(i), ID: rtID("payments", i), Time: rtTime(i)}
	}
	b.Run("make", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewSnapshot(d, r, signer); err != nil {
				b.Fatal(err)
			}
		}
	})
	s, err := NewSnapshot(d, r, signer)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Open(d, fp, verifier); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(s.State)), "state-bytes")
	})
}

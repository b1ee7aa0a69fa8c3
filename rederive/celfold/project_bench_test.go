package celfold

import (
	"fmt"
	"testing"
)

// BenchmarkProjectJSON measures the fast path's scan of a payload
// (projectJSON: validate, keep the plan's fields) alone, over the
// payloads of BenchmarkCELSum (6 members, 2 fields kept) and
// BenchmarkCELSumByKey (9 members, one an array; 4 kept). For
// instructions per payload, run it under callgrind at two -benchtime
// counts and divide the difference.
func BenchmarkProjectJSON(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload func(i int) string
		fields  []string
	}{
		{"sum", func(i int) string {
			return fmt.Sprintf(`{"id":"e-%d","type":"payment","account":"acct-%06d","amount":%d,"currency":"EUR","memo":"%0120d"}`,
				i, (i*7919)%100_000, 1+(i*31)%99_999, i)
		}, []string{"account", "amount"}},
		{"sumbykey", func(i int) string {
			return fmt.Sprintf(`{"id":"pay-%08d","type":"transfer","from":"acct-%06d","to":"acct-%06d","amount":%d,"currency":"EUR","memo":"invoice %d settlement","created":"2025-03-01T12:%02d:00Z","tags":["sepa","batch-7"]}`,
				i, (i*7919)%100_000, (i*104729+3)%100_000, 100+i%9000, i, i%60)
		}, []string{"amount", "from", "to", "type"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ps := make([][]byte, 1024)
			for i := range ps {
				ps[i] = []byte(c.payload(i))
			}
			vals := make([]fastVal, len(c.fields))
			b.SetBytes(int64(len(ps[0])))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !projectJSON(ps[i%len(ps)], c.fields, vals) {
					b.Fatal("not projected")
				}
				i++
			}
		})
	}
}

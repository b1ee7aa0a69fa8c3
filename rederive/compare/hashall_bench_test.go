package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/auditd/auditd/rederive/store"
)

// BenchmarkHashAll hashes 2,000,000 expected rows (keys like the sums
// benchmark's, json.Number values) into 1,024 buckets, as the first sums
// do on the Go side; ns/op is per comparison.
//
//	go test -run '^$' -bench HashAll -benchtime 5x ./rederive/compare/
func BenchmarkHashAll(b *testing.B) {
	const n = 2_000_000
	expected := make(map[string]any, n)
	for i := range n {
		cents := int64(i)*7919%10_000_000 - 1_000_000
		expected[fmt.Sprintf("key-%08d", i)] = json.Number(fmt.Sprintf("%d.%02d", cents/100, max(cents, -cents)%100))
	}
	h := &hasher{layout: store.SumLayout{Single: true, Numeric: true, Columns: []string{"value"}}, seed: 42}
	b.ResetTimer()
	for b.Loop() {
		if _, err := hashAll(context.Background(), expected, h, 10); err != nil {
			b.Fatal(err)
		}
	}
}

package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/auditd/auditd/rederive/store"
)

// BenchmarkCompareMemory is Compare's own cost: 1,000,000 rows from
// memory against the expected values of the same keys.
func BenchmarkCompareMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("builds 1,000,000 rows: not with -short")
	}
	const rows = 1_000_000
	s := &compareTestStore{rows: make([]store.Row, rows)}
	expected := make(map[string]any, rows)
	for i := range rows {
		k := fmt.Sprintf("key-%07d", i)
		s.rows[i] = store.Row{Key: k, Value: json.Number(fmt.Sprintf("%d.%02d", i, i%100))}
		expected[k] = json.Number(fmt.Sprintf("%d.%02d", i, i%100))
	}
	b.ReportAllocs()
	var total int64
	for b.Loop() {
		st, err := Compare(context.Background(), s, expected, Config{}, func(d Drift) error {
			return fmt.Errorf("drift %+v", d)
		})
		if err != nil || st.Matched != rows {
			b.Fatal(st, err)
		}
		total += st.Rows
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "rows/s")
}

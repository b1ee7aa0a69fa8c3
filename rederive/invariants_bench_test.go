package rederive_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/auditd/auditd/rederive"
)

// BenchmarkInvariantsCheck checks a per-key and an all-keys invariant over
// 100,000 exported states (ints, or decimals as Export gives them), all
// holding: the cost of a pass of the invariant check besides loading the
// result and exporting it.
func BenchmarkInvariantsCheck(b *testing.B) {
	for _, kind := range []string{"int", "decimal"} {
		b.Run(kind, func(b *testing.B) {
			const n = 100_000
			states := make(map[string]any, n)
			for i := range n {
				v := int64(i/2) % 500
				if i%2 == 1 {
					v = -v // the keys sum to 0
				}
				states[fmt.Sprintf("acct-%06d", i)] = v
				if kind == "decimal" {
					states[fmt.Sprintf("acct-%06d", i)] = json.Number(strconv.FormatInt(v, 10) + ".00")
				}
			}
			iv, err := rederive.CompileInvariants("bal", []rederive.InvariantSpec{
				{Name: "bounded", PerKey: "state >= -500"},
				{Name: "balanced", All: "sum(values) == 0"},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if fs := iv.Check(sorted(states)); len(fs) != 0 {
					b.Fatal(fs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/key")
		})
	}
}

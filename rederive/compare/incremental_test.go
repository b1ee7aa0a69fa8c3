package compare_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
)

// TestCompareChanged takes a baseline at a clean comparison, changes a
// few expected values (one the store followed, one it did not, a new key
// the store lacks, a key deleted that the store still holds) and tampers
// with one unchanged row: the incremental comparison reads only the
// changed keys' rows and reports exactly their drift; the tampered row is
// left to the full comparison, which finds it.
func TestCompareChanged(t *testing.T) {
	ctx := context.Background()
	const n = 1500 // past a chunk of the key-set's 1,024 slots
	var rows [][]any
	exp := map[string]any{}
	for i := range n {
		k := fmt.Sprintf("acct-%05d", i)
		rows = append(rows, []any{k, fmt.Sprintf("%d.50", i)})
		exp[k] = json.Number(fmt.Sprintf("%d.5", i))
	}
	// The store as it will be: acct-00001 followed its change, acct-00002
	// did not, acct-00004 is deleted yet held, acct-00005 was tampered.
	rows[1][1] = "111.00"
	rows[5][1] = "0.01"
	cfg := sumsTable(t, "key text PRIMARY KEY, value numeric(12,2)", rows)
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The baseline: the values as they were when the store was clean
	// (acct-00001 was 1.5 then, acct-00005 5.5).
	old := map[string]any{}
	for k, v := range exp {
		old[k] = v
	}
	old["acct-00001"] = json.Number("1.5")
	base := compare.NewBaseline(old)
	blob, _ := base.MarshalBinary()
	var back compare.Baseline
	if err := back.UnmarshalBinary(blob); err != nil || back.Len() != n {
		t.Fatalf("baseline round trip: %v, %d keys", err, back.Len())
	}

	exp["acct-00001"] = json.Number("111")
	exp["acct-00002"] = json.Number("2")
	exp["acct-99999"] = json.Number("1")
	exp["acct-00004"] = nil
	collect := func(run func(fn func(compare.Drift) error) (compare.Stats, error)) (compare.Stats, []string) {
		t.Helper()
		var got []string
		st, err := run(func(d compare.Drift) error { got = append(got, string(d.Kind)+" "+d.Key); return nil })
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return st, got
	}
	st, got := collect(func(fn func(compare.Drift) error) (compare.Stats, error) {
		return compare.CompareChanged(ctx, s, exp, &back, compare.Config{}, fn)
	})
	want := []string{"mismatch acct-00002", "mismatch acct-00004", "missing acct-99999"}
	if !slices.Equal(got, want) {
		t.Errorf("incremental drift %q, want %q", got, want)
	}
	if st.Rows != 3 || st.Unchanged != n-3 || st.Matched+st.Missing+st.Mismatched != st.Keys {
		t.Errorf("incremental stats %+v: want 3 rows read (acct-00001, -00002, -00004) and %d unchanged", st, n-3)
	}
	_, full := collect(func(fn func(compare.Drift) error) (compare.Stats, error) {
		return compare.Compare(ctx, s, exp, compare.Config{}, fn)
	})
	if want := append(want, "mismatch acct-00005"); !slices.Equal(full, slices.Sorted(slices.Values(want))) {
		t.Errorf("full drift %q, want %q", full, want)
	}

	// A key of the baseline no longer expected: no incremental comparison.
	delete(exp, "acct-00003")
	if _, err := compare.CompareChanged(ctx, s, exp, &back, compare.Config{}, func(compare.Drift) error { return nil }); !errors.Is(err, compare.ErrNoBaseline) {
		t.Errorf("a key gone from the expected values: %v, want ErrNoBaseline", err)
	}
}

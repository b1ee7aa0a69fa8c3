package compare_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// BenchmarkCompareSums compares a PostgreSQL table of AUDITD_BENCH_SUMS_ROWS
// rows (key text COLLATE "C" PRIMARY KEY, value numeric(14,2)) holding
// one wrong row with the expected values, by sums ("sums") and by reading
// every row ("rows"), and reports the rows read from the store per
// comparison and their share of the table, the median wall time of a
// comparison and this process's CPU time per comparison (the database's
// is not in it). The table,
// auditd_bench_sums_<rows>, is loaded once and kept for later runs
// (loading 10,000,000 rows takes minutes); drop it to reload. Without
// the variable the benchmark is skipped.
//
//	AUDITD_BENCH_SUMS_ROWS=10000000 go test -run '^$' -bench CompareSums -benchtime 3x ./rederive/compare/
func BenchmarkCompareSums(b *testing.B) {
	rows, _ := strconv.Atoi(os.Getenv("AUDITD_BENCH_SUMS_ROWS"))
	if rows <= 0 {
		b.Skip("set AUDITD_BENCH_SUMS_ROWS to the table's size (10000000 for the issue's target)")
	}
	ctx := context.Background()
	conn := storetest.PostgresConn(b)
	table := fmt.Sprintf("auditd_bench_sums_%d", rows)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		b.Fatal(err)
	}
	if !exists {
		b.Logf("loading %d rows into %s (once)", rows, table)
		for _, sql := range []string{
			"DROP TABLE IF EXISTS " + table + "_load",
			"CREATE TABLE " + table + "_load (key text COLLATE \"C\" NOT NULL, value numeric(14,2))",
			fmt.Sprintf("INSERT INTO %s_load SELECT 'key-' || lpad(i::text, 8, '0'), ((i::bigint * 7919 %% 10000000) - 1000000) / 100.0 FROM generate_series(0, %d) i", table, rows-1),
			"ALTER TABLE " + table + "_load ADD PRIMARY KEY (key)",
			"VACUUM ANALYZE " + table + "_load",
			"ALTER TABLE " + table + "_load RENAME TO " + table,
		} {
			storetest.Exec(b, conn, sql)
		}
	}
	expected := make(map[string]any, rows)
	for i := range rows {
		cents := int64(i)*7919%10_000_000 - 1_000_000
		sign := ""
		if cents < 0 {
			sign = "-"
		}
		abs := max(cents, -cents)
		expected[fmt.Sprintf("key-%08d", i)] = json.Number(fmt.Sprintf("%s%d.%02d", sign, abs/100, abs%100))
	}
	wrong := fmt.Sprintf("key-%08d", rows*2/3)
	expected[wrong] = json.Number("0.01") // the store's row is wrong
	s, err := store.Open(ctx, store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: table}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, m := range []compare.Method{compare.MethodSums, compare.MethodRows} {
		b.Run(string(m), func(b *testing.B) {
			var read, queries int64
			var walls []time.Duration
			cpu0 := processCPU()
			for b.Loop() {
				t0 := time.Now()
				var drift []string
				st, err := compare.Compare(ctx, s, expected, compare.Config{Method: m}, func(d compare.Drift) error {
					drift = append(drift, d.Key)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if len(drift) != 1 || drift[0] != wrong {
					b.Fatalf("drift %q, want [%q]; stats %+v", drift, wrong, st)
				}
				read += st.Rows
				queries += st.SumQueries
				walls = append(walls, time.Since(t0))
			}
			n := float64(b.N)
			slices.Sort(walls)
			b.ReportMetric(walls[len(walls)/2].Seconds(), "median-s/op")
			b.ReportMetric((processCPU()-cpu0).Seconds()/n, "go-cpu-s/op")
			b.ReportMetric(float64(read)/n, "rows-read/op")
			b.ReportMetric(100*float64(read)/n/float64(rows), "%read")
			b.ReportMetric(float64(queries)/n, "sum-queries/op")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

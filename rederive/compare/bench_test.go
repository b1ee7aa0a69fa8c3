package compare_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// BenchmarkComparePostgres compares a PostgreSQL table of 1,000,000 rows
// (key text, value numeric) with the expected values of the same keys,
// and reports rows per second: "compare" is Compare end to end, "scan"
// the store's Scan alone.
func BenchmarkComparePostgres(b *testing.B) {
	if testing.Short() {
		b.Skip("loads a 1,000,000-row PostgreSQL table: not with -short")
	}
	const rows = 1_000_000
	ctx := context.Background()
	conn := storetest.PostgresConn(b)
	table := storetest.PostgresTable(b, conn, "key text, value numeric(14,2)")
	value := func(i int) (cents int64, text string) {
		cents = int64(i)*7919%10_000_000 - 1_000_000
		sign := ""
		if cents < 0 {
			sign = "-"
		}
		abs := max(cents, -cents)
		return cents, fmt.Sprintf("%s%d.%02d", sign, abs/100, abs%100)
	}
	i := 0
	n, err := conn.CopyFrom(ctx, pgx.Identifier{strings.Trim(table, `"`)}, []string{"key", "value"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == rows {
				return nil, nil
			}
			cents, _ := value(i)
			r := []any{fmt.Sprintf("key-%07d", i), pgtype.Numeric{Int: big.NewInt(cents), Exp: -2, Valid: true}}
			i++
			return r, nil
		}))
	if err != nil || n != rows {
		b.Fatalf("COPY: %d rows, %v", n, err)
	}
	storetest.Exec(b, conn, "VACUUM ANALYZE "+table)
	expected := make(map[string]any, rows)
	for i := range rows {
		_, text := value(i)
		expected[fmt.Sprintf("key-%07d", i)] = json.Number(text)
	}
	s, err := store.Open(ctx, store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: strings.Trim(table, `"`)}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	b.Run("compare", func(b *testing.B) {
		b.ReportAllocs()
		var total int64
		for b.Loop() {
			st, err := compare.Compare(ctx, s, expected, compare.Config{}, func(d compare.Drift) error {
				return fmt.Errorf("drift %+v", d)
			})
			if err != nil {
				b.Fatal(err)
			}
			if st.Matched != rows {
				b.Fatalf("stats %+v", st)
			}
			total += st.Rows
		}
		b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		var total int64
		for b.Loop() {
			err := s.Scan(ctx, func(store.Row) error { total++; return nil })
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkEqual compares scalars in the forms stores and derivations
// give them.
func BenchmarkEqual(b *testing.B) {
	for _, bc := range []struct {
		name     string
		exp, act any
	}{
		{"same-text", json.Number("12345.67"), json.Number("12345.67")},
		{"decimal-scale", json.Number("12345.6"), json.Number("12345.60")},
		{"int-decimal", int64(1234567), json.Number("1234567")},
		{"float-decimal", 12345.67, json.Number("12345.67")},
		{"map", map[string]any{"a": json.Number("1"), "b": "x"}, map[string]any{"a": json.Number("1.0"), "b": "x"}},
		{"text-string", "10115", store.Text("10115")},
		{"text-number", int64(1234567), store.Text("1234567")},
		{"time-string", time.Date(2024, 5, 1, 9, 30, 0, 0, time.FixedZone("", 14*3600)), "2024-04-30T19:30:00.000000Z"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if compare.Equal(bc.exp, bc.act, compare.Config{}) != nil {
					b.Fatal("not equal")
				}
			}
		})
	}
}

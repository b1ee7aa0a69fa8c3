package compare_test

// Verdicts against the real stores: each test loads realistic data,
// past 1,024 keys, into PostgreSQL, Redis or a file as the service that
// owns it would write it, compares it with the values a derivation
// exports, and checks that nothing matching is drift and that each real
// difference is.

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// compareStore opens c and compares it with expected, returning the
// stats and the drifts by key.
func compareStore(t *testing.T, c store.Config, expected map[string]any, cfg compare.Config) (compare.Stats, map[string]compare.Drift) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	drifts := make(map[string]compare.Drift)
	st, err := compare.Compare(ctx, s, expected, cfg, func(d compare.Drift) error {
		drifts[d.Key] = d
		return nil
	})
	if err != nil {
		t.Fatalf("Compare: %v", err)
	}
	return st, drifts
}

// driftKeys lists the drifted keys, sorted, with their kinds.
func driftKeys(drifts map[string]compare.Drift) []string {
	var keys []string
	for k, d := range drifts {
		keys = append(keys, string(d.Kind)+" "+k)
	}
	slices.Sort(keys)
	return keys
}

// tsEvent is an order update carrying its time in the zone of the
// service that sent it.
type tsEvent struct {
	order string
	ts    time.Time
}

// tsEvents returns n order updates over keys orders, in ledger order,
// their times in four zones (+14:00, -12:00, +05:45, UTC) and some with
// fractions of a second.
func tsEvents(n, orders int) []tsEvent {
	zones := []*time.Location{time.FixedZone("", 14*3600), time.FixedZone("", -12*3600), time.FixedZone("", 5*3600+45*60), time.UTC}
	base := time.Date(2024, 3, 30, 22, 0, 0, 0, time.UTC) // a day boundary in every zone
	evs := make([]tsEvent, n)
	for i := range evs {
		ts := base.Add(time.Duration(i)*37*time.Second + time.Duration(i%5)*250*time.Millisecond + time.Duration(i%3)*time.Microsecond)
		evs[i] = tsEvent{order: fmt.Sprintf("order-%05d", i%orders), ts: ts.In(zones[i%len(zones)])}
	}
	return evs
}

// TestCompareTimestamps: a state timestamp(event.ts), exported as the
// instant with the event's offset, against a PostgreSQL timestamptz
// column, a timestamp column (UTC wall clock) and a JSONL file written in
// other offsets: no drift; one stored instant a second off: one mismatch.
func TestCompareTimestamps(t *testing.T) {
	evs := tsEvents(1500, 1100)
	// The fold: last writer wins.
	last := make(map[string]time.Time)
	for _, e := range evs {
		last[e.order] = e.ts
	}
	expected := make(map[string]any, len(last))
	for k, ts := range last {
		expected[k] = ts
	}
	const off = "order-00777" // the row whose instant really differs
	stored := func(k string) time.Time {
		if k == off {
			return last[k].Add(time.Second)
		}
		return last[k]
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range last {
			if !yield(k) {
				return
			}
		}
	})
	wantOne := func(t *testing.T, st compare.Stats, drifts map[string]compare.Drift) {
		t.Helper()
		if st.Matched != int64(len(keys))-1 || st.Mismatched != 1 || st.Missing != 0 || st.Extra != 0 {
			t.Errorf("stats %+v: want %d matched and one mismatch", st, len(keys)-1)
		}
		if d, ok := drifts[off]; !ok || d.Kind != compare.DriftMismatch || len(drifts) != 1 {
			t.Errorf("drifts %v, want one mismatch on %s", driftKeys(drifts), off)
		}
	}

	t.Run("postgres", func(t *testing.T) {
		conn := storetest.PostgresConn(t)
		table := storetest.PostgresTable(t, conn, "id text PRIMARY KEY, updated_at timestamptz, updated_utc timestamp")
		var lines []string
		for _, k := range keys {
			// As the service writes it: the event's text, offset and
			// all; and the UTC wall clock in a timestamp column.
			lines = append(lines, k+"\t"+stored(k).Format(time.RFC3339Nano)+"\t"+stored(k).UTC().Format("2006-01-02 15:04:05.999999"))
		}
		storetest.Copy(t, conn, table, lines)
		for _, col := range []string{"updated_at", "updated_utc"} {
			t.Run(col, func(t *testing.T) {
				c := store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Query: "SELECT id, " + col + " FROM " + table}}
				st, drifts := compareStore(t, c, expected, compare.Config{})
				wantOne(t, st, drifts)
				// Timestamps exported as RFC 3339 text, with the event's
				// offset or in UTC: a timestamp column is an instant, so
				// the text compares with it as one.
				for _, utc := range []bool{false, true} {
					asText := make(map[string]any, len(expected))
					for k, v := range expected {
						if utc {
							v = v.(time.Time).UTC()
						}
						asText[k] = v.(time.Time).Format(time.RFC3339Nano)
					}
					st, drifts = compareStore(t, c, asText, compare.Config{})
					wantOne(t, st, drifts)
				}
			})
		}
	})

	t.Run("jsonl", func(t *testing.T) {
		// Written by a service that renders times in its own offset,
		// with microseconds: never the event's text.
		zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+45*60), time.FixedZone("", -12*3600), time.FixedZone("", 14*3600)}
		p := filepath.Join(t.TempDir(), "orders.jsonl")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriter(f)
		text := make(map[string]string)
		for i, k := range keys {
			text[k] = stored(k).In(zones[i%len(zones)]).Format("2006-01-02T15:04:05.000000Z07:00")
			b, _ := json.Marshal(map[string]any{"id": k, "updated_at": text[k]})
			bw.Write(append(b, '\n'))
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		c := store.Config{File: &store.FileConfig{Path: p, KeyField: "id"}}
		st, drifts := compareStore(t, c, expected, compare.Config{})
		wantOne(t, st, drifts)

		// Strings on both sides stay strings: an expected string state
		// is compared with the file's text as text.
		asText := make(map[string]any, len(expected))
		differ := 0
		for k, v := range expected {
			asText[k] = v.(time.Time).Format(time.RFC3339Nano)
			if asText[k] != text[k] {
				differ++
			}
		}
		st, _ = compareStore(t, c, asText, compare.Config{})
		if differ < len(keys)/2 || st.Mismatched != int64(differ) {
			t.Errorf("expected strings: %d mismatched, want %d (every text that differs)", st.Mismatched, differ)
		}
	})
}

// TestCompareUntypedText: customers with postcodes and SKUs that look
// like numbers, in a CSV file, Redis hashes and Redis strings, against
// string states; and the numeric states beside them against the same
// kind of cells. Only the values that really differ are drift.
func TestCompareUntypedText(t *testing.T) {
	const n = 1500
	type customer struct {
		zip, sku string
		qty      int64
		price    json.Number
		active   bool
	}
	skus := []string{"00123", "1e3", "  7", "10115", "7.50", "-0", "SKU-9"}
	cust := make(map[string]customer, n)
	var keys []string
	for i := range n {
		k := fmt.Sprintf("cust-%05d", i)
		keys = append(keys, k)
		cust[k] = customer{
			zip:    fmt.Sprintf("%05d", (10115+i*7)%100000), // "10115", "00042"
			sku:    skus[i%len(skus)],
			qty:    int64(i % 12),
			price:  json.Number(fmt.Sprintf("%d.%02d", i%90, i%4*25)), // "12.50", "3.00"
			active: i%3 != 0,
		}
	}
	expected := make(map[string]any, n)
	for k, c := range cust {
		expected[k] = map[string]any{"zip": c.zip, "sku": c.sku, "qty": c.qty, "price": c.price, "active": c.active}
	}
	// The cells as the service writes them; three really differ.
	cells := func(k string) map[string]string {
		c := cust[k]
		m := map[string]string{"zip": c.zip, "sku": c.sku, "qty": strconv.FormatInt(c.qty, 10),
			"price": strings.TrimSuffix(string(c.price), "0"), "active": strconv.FormatBool(c.active)}
		switch k {
		case "cust-00100":
			m["zip"] = "10816" // a string state that differs
		case "cust-00200":
			m["qty"] = strconv.FormatInt(c.qty+1, 10) // a number that differs
		case "cust-00300":
			m["qty"] = fmt.Sprintf("%03d", c.qty) // "000": no number (see Equal)
		}
		return m
	}
	wantDrift := []string{"mismatch cust-00100", "mismatch cust-00200", "mismatch cust-00300"}
	check := func(t *testing.T, c store.Config, expected map[string]any, want []string) {
		t.Helper()
		st, drifts := compareStore(t, c, expected, compare.Config{})
		if got := driftKeys(drifts); !slices.Equal(got, want) {
			t.Errorf("drifts %v, want %v", got, want)
		}
		if st.Matched != int64(len(expected)-len(want)) {
			t.Errorf("stats %+v: want %d matched", st, len(expected)-len(want))
		}
	}
	fields := []string{"zip", "sku", "qty", "price", "active"}

	t.Run("csv", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "customers.csv")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		w := csv.NewWriter(f)
		w.Write(append([]string{"id"}, fields...))
		for _, k := range keys {
			m := cells(k)
			rec := []string{k}
			for _, f := range fields {
				rec = append(rec, m[f])
			}
			w.Write(rec)
		}
		w.Flush()
		if err := w.Error(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		c := store.Config{File: &store.FileConfig{Path: p, KeyField: "id"}}
		check(t, c, expected, wantDrift)
		// One column: the postcode alone, a string state.
		zips := make(map[string]any, n)
		for k, cu := range cust {
			zips[k] = cu.zip
		}
		zips["cust-00100"] = "10816"
		p2 := filepath.Join(t.TempDir(), "zips.csv")
		var b strings.Builder
		b.WriteString("id,zip\n")
		for _, k := range keys {
			b.WriteString(k + "," + cells(k)["zip"] + "\n")
		}
		if err := os.WriteFile(p2, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		zips["cust-00042"] = "10410" // the store has "10409"
		check(t, store.Config{File: &store.FileConfig{Path: p2, KeyField: "id"}}, zips, []string{"mismatch cust-00042"})
	})

	t.Run("redis-hash", func(t *testing.T) {
		client, prefix := storetest.RedisClient(t)
		ctx := context.Background()
		pipe := client.Pipeline()
		for _, k := range keys {
			for f, v := range cells(k) {
				pipe.HSet(ctx, prefix+"cust:"+k, f, v)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, store.Config{Redis: &store.RedisConfig{Addr: storetest.RedisAddr(), Prefix: prefix + "cust:", Type: "hash"}}, expected, wantDrift)
	})

	t.Run("redis-string", func(t *testing.T) {
		client, prefix := storetest.RedisClient(t)
		ctx := context.Background()
		pipe := client.Pipeline()
		skuState := make(map[string]any, n)
		qtyState := make(map[string]any, n)
		for _, k := range keys {
			m := cells(k)
			pipe.Set(ctx, prefix+"sku:"+k, m["sku"], 0)
			pipe.Set(ctx, prefix+"qty:"+k, m["qty"], 0)
			skuState[k] = cust[k].sku
			qtyState[k] = cust[k].qty
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		// String states ("00123", "1e3", "  7") against their text.
		skuState["cust-00500"] = "00124"
		check(t, store.Config{Redis: &store.RedisConfig{Addr: storetest.RedisAddr(), Prefix: prefix + "sku:", Type: "string"}}, skuState,
			[]string{"mismatch cust-00500"})
		// Numeric states against their text.
		check(t, store.Config{Redis: &store.RedisConfig{Addr: storetest.RedisAddr(), Prefix: prefix + "qty:", Type: "string"}}, qtyState,
			[]string{"mismatch cust-00200", "mismatch cust-00300"})
	})
}

// orderEvent is an order's status change, or its deletion (status "").
type orderEvent struct {
	order, status string
	at            time.Time
}

// orderEvents returns the events of n orders: each created, then paid and
// shipped, or cancelled and deleted (one in five), interleaved.
func orderEvents(n int) []orderEvent {
	base := time.Date(2024, 5, 1, 8, 0, 0, 0, time.UTC)
	var evs []orderEvent
	for step := range 3 {
		for i := range n {
			o := fmt.Sprintf("ord-%05d", i)
			at := base.Add(time.Duration(step*n+i) * time.Second)
			switch {
			case i%5 == 4 && step == 1:
				evs = append(evs, orderEvent{o, "cancelled", at})
			case i%5 == 4 && step == 2:
				evs = append(evs, orderEvent{o, "", at}) // deleted
			default:
				evs = append(evs, orderEvent{o, []string{"created", "paid", "shipped"}[step], at})
			}
		}
	}
	return evs
}

// TestCompareDeletedPostgres: the last status of each order, deleted
// orders null, against a table where the service deletes the row, and one
// where it keeps a NULL row (a tombstone), under both rules.
func TestCompareDeletedPostgres(t *testing.T) {
	const n = 2000
	expected := make(map[string]any)
	for _, e := range orderEvents(n) {
		if e.status == "" {
			expected[e.order] = nil // the step returns null
			continue
		}
		expected[e.order] = map[string]any{"status": e.status, "updated_at": e.at}
	}
	deleted := 0
	for _, v := range expected {
		if v == nil {
			deleted++
		}
	}
	conn := storetest.PostgresConn(t)
	load := func(tombstones bool) string {
		table := storetest.PostgresTable(t, conn, "id text PRIMARY KEY, status text, updated_at timestamptz")
		var lines []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range expected {
				if !yield(k) {
					return
				}
			}
		}) {
			v := expected[k]
			if v == nil {
				if tombstones {
					lines = append(lines, k+"\t\\N\t\\N")
				}
				continue
			}
			m := v.(map[string]any)
			lines = append(lines, k+"\t"+m["status"].(string)+"\t"+m["updated_at"].(time.Time).Format(time.RFC3339))
		}
		storetest.Copy(t, conn, table, lines)
		return table
	}
	cfg := func(table string) store.Config {
		return store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: strings.Trim(table, `"`)}}
	}
	absent := compare.Config{}
	null := compare.Config{Deleted: compare.DeletedNull}

	t.Run("rows deleted", func(t *testing.T) {
		table := load(false)
		for name, c := range map[string]compare.Config{"absent": absent, "null": null, "null_is_missing": {NullIsMissing: true}} {
			st, drifts := compareStore(t, cfg(table), expected, c)
			if len(drifts) != 0 || st.Matched != int64(len(expected)) {
				t.Errorf("%s: stats %+v, drifts %v; want every key matched", name, st, driftKeys(drifts)[:min(5, len(drifts))])
			}
		}
		// Real drift: a delete the store missed, a NULL row nothing
		// derives, a live order gone and one nulled.
		storetest.Exec(t, conn, "INSERT INTO "+table+" VALUES ('ord-00004', 'cancelled', '2024-05-01T08:00:04Z')")
		storetest.Exec(t, conn, "INSERT INTO "+table+" VALUES ('ord-99999', NULL, NULL)")
		storetest.Exec(t, conn, "DELETE FROM "+table+" WHERE id = 'ord-00010'")
		storetest.Exec(t, conn, "UPDATE "+table+" SET status = NULL, updated_at = NULL WHERE id = 'ord-00011'")
		_, drifts := compareStore(t, cfg(table), expected, absent)
		want := []string{"extra ord-99999", "mismatch ord-00004", "mismatch ord-00011", "missing ord-00010"}
		if got := driftKeys(drifts); !slices.Equal(got, want) {
			t.Errorf("absent: drifts %v, want %v", got, want)
		}
		if d := drifts["ord-00004"]; len(d.Fields) != 1 || d.Fields[0].Absent != "expected" {
			t.Errorf("absent: the missed delete %+v: want one field diff, expected absent", d)
		}
		_, drifts = compareStore(t, cfg(table), expected, null)
		want = []string{"mismatch ord-00004", "mismatch ord-00011", "missing ord-00010"}
		if got := driftKeys(drifts); !slices.Equal(got, want) {
			t.Errorf("null: drifts %v, want %v", got, want)
		}
	})

	t.Run("tombstones", func(t *testing.T) {
		table := load(true)
		st, drifts := compareStore(t, cfg(table), expected, absent)
		if st.Mismatched != int64(deleted) || len(drifts) != deleted || st.Matched != int64(len(expected)-deleted) {
			t.Errorf("absent: stats %+v; want each of the %d NULL rows of deleted orders a mismatch", st, deleted)
		}
		st, drifts = compareStore(t, cfg(table), expected, null)
		if len(drifts) != 0 || st.Matched != int64(len(expected)) {
			t.Errorf("null: stats %+v, drifts %v; want every key matched", st, driftKeys(drifts)[:min(5, len(drifts))])
		}
		// A tombstone that is not one: a deleted order with a status.
		storetest.Exec(t, conn, "UPDATE "+table+" SET status = 'paid' WHERE id = 'ord-00009'")
		storetest.Exec(t, conn, "INSERT INTO "+table+" VALUES ('ord-99999', NULL, NULL)")
		_, drifts = compareStore(t, cfg(table), expected, null)
		if got, want := driftKeys(drifts), []string{"mismatch ord-00009"}; !slices.Equal(got, want) {
			t.Errorf("null: drifts %v, want %v", got, want)
		}
	})
}

// TestCompareSchemaPostgres: balances in cents against a column of the
// wrong type is one configuration error naming the column, not 2,000
// drifts; against the right type, only the real difference is drift.
func TestCompareSchemaPostgres(t *testing.T) {
	const n = 2000
	ctx := context.Background()
	conn := storetest.PostgresConn(t)
	cents := make(map[string]any, n)
	skus := make(map[string]any, n)
	var lines []string
	for i := range n {
		k := fmt.Sprintf("acct-%05d", i)
		c := int64(i)*7919%1_000_000 - 50_000
		cents[k] = c
		skus[k] = fmt.Sprintf("%05d", i*37%100000)
		lines = append(lines, fmt.Sprintf("%s\t%d\t%d\t%s", k, c, c, skus[k]))
	}
	table := storetest.PostgresTable(t, conn, "id text PRIMARY KEY, cents_text text, cents bigint, sku text")
	storetest.Copy(t, conn, table, lines)
	query := func(cols string) store.Config {
		return store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Query: "SELECT id, " + cols + " FROM " + table}}
	}
	for _, tc := range []struct {
		name     string
		c        store.Config
		expected map[string]any
		want     []string
	}{
		{"cents in text", query("cents_text"), cents, []string{`column "cents_text"`, "type text", "numbers"}},
		{"skus in bigint", query("sku::bigint AS sku"), skus, []string{`column "sku"`, "type int8", "strings"}},
		{"one of two columns", query("cents_text AS cents, sku"), func() map[string]any {
			m := make(map[string]any, n)
			for k := range cents {
				m[k] = map[string]any{"cents": cents[k], "sku": skus[k]}
			}
			return m
		}(), []string{`column "cents"`, "type text", "numbers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(ctx, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			drifts := 0
			st, err := compare.Compare(ctx, s, tc.expected, compare.Config{}, func(compare.Drift) error { drifts++; return nil })
			if !errors.Is(err, compare.ErrSchema) || !errors.Is(err, compare.ErrConfig) || errors.Is(err, store.ErrStore) {
				t.Fatalf("Compare = %+v, %v (%d drifts); want an ErrSchema error", st, err, drifts)
			}
			if drifts != 0 || st.Rows != 0 {
				t.Errorf("%d drifts, %d rows read; want none before the schema is right", drifts, st.Rows)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	// The right types: no drift, and a real difference in each direction
	// is one.
	cents["acct-00042"] = cents["acct-00042"].(int64) + 1
	skus["acct-00043"] = "99999"
	for name, tc := range map[string]struct {
		c        store.Config
		expected map[string]any
		want     string
	}{
		"cents": {query("cents"), cents, "mismatch acct-00042"},
		"skus":  {query("sku"), skus, "mismatch acct-00043"},
	} {
		st, drifts := compareStore(t, tc.c, tc.expected, compare.Config{})
		if got := driftKeys(drifts); !slices.Equal(got, []string{tc.want}) || st.Matched != n-1 {
			t.Errorf("%s: stats %+v, drifts %v; want only %s", name, st, got, tc.want)
		}
	}
}

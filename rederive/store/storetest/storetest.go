// Package storetest is the conformance suite of the store.Store contract:
// Run checks one backend (rows of every JSON type, scanning, watermarks,
// cancellation, the comparison over it), and the helpers reach the real
// PostgreSQL and Redis the tests run against (AUDITD_TEST_PG,
// AUDITD_TEST_REDIS).
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
)

// PostgresDSN is the test database (AUDITD_TEST_PG, default the local
// PostgreSQL's database test).
func PostgresDSN() string {
	if v := os.Getenv("AUDITD_TEST_PG"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisAddr is the test Redis (AUDITD_TEST_REDIS, default the local one).
func RedisAddr() string {
	if v := os.Getenv("AUDITD_TEST_REDIS"); v != "" {
		return v
	}
	return "127.0.0.1:6379"
}

// Name is a name no other test or run uses.
func Name(kind string) string {
	return fmt.Sprintf("auditd_test_%s_%d_%x", kind, os.Getpid(), rand.Uint64())
}

// PostgresConn connects to the test database; t's cleanup closes it.
func PostgresConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresDSN())
	if err != nil {
		t.Fatalf("PostgreSQL for the tests (AUDITD_TEST_PG): %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Exec runs sql, failing t on an error.
func Exec(t testing.TB, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// PostgresTable creates a table from DDL columns, drops it at t's end,
// and returns its quoted name.
func PostgresTable(t testing.TB, conn *pgx.Conn, columns string) string {
	t.Helper()
	table := pgx.Identifier{Name("t")}.Sanitize()
	Exec(t, conn, "CREATE TABLE "+table+" ("+columns+")")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn.Exec(ctx, "DROP TABLE IF EXISTS "+table)
	})
	return table
}

// Copy loads lines of COPY text format (tab-separated, \N for
// NULL) into table.
func Copy(t testing.TB, conn *pgx.Conn, table string, lines []string) {
	t.Helper()
	r := strings.NewReader(strings.Join(lines, "\n") + "\n")
	if len(lines) == 0 {
		return
	}
	if _, err := conn.PgConn().CopyFrom(context.Background(), r, "COPY "+table+" FROM STDIN"); err != nil {
		t.Fatalf("COPY %s: %v", table, err)
	}
}

// RedisClient connects to the test Redis and returns a key prefix of
// its own; t's cleanup deletes the keys under it and closes the client.
func RedisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(), DisableIdentity: true})
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis for the tests (AUDITD_TEST_REDIS): %v", err)
	}
	prefix := Name("r") + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, store.EscapeGlob(prefix)+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			c.Del(ctx, keys[:n]...)
			keys = keys[n:]
		}
		c.Close()
	})
	return c, prefix
}

// Caps says which values a backend holds.
type Caps struct {
	// Scalar: each key holds one scalar (a Redis string), not an object.
	Scalar bool
	// Text: every value is untyped text (CSV, a Redis hash or string),
	// read back as store.Text, so there is no null and no boolean; the
	// comparison reads the text by the expected value's type.
	Text bool
}

// Backend is one way of storing rows, for the suite to read back.
type Backend struct {
	Name string
	Caps Caps
	// Open stores rows in a place of its own (cleaned up with t) and
	// returns the config that reads them; with marks not nil, the config
	// reports those watermarks.
	Open func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config
}

// Rows returns n rows a backend with caps can hold:
// decimals with trailing zeros, integers past 2^53, floats, strings
// (one that only looks like a number), and with typed backends nulls and
// booleans.
func Rows(n int, caps Caps) []store.Row {
	rows := make([]store.Row, n)
	for i := range rows {
		key := fmt.Sprintf("acct-%05d", i)
		amount := json.Number(fmt.Sprintf("%d.%02d", i*37%100000-5000, i%4*25)) // 12.50, -3.00
		count := json.Number(strconv.FormatInt(int64(i)*1_000_003+9007199254740993, 10))
		name := fmt.Sprintf("user %d", i)
		if i%10 == 3 {
			name = "007" // a string that looks like a number, but is not a JSON one
		}
		if caps.Scalar {
			var v any = amount
			switch i % 3 {
			case 1:
				v = count
			case 2:
				v = name
			}
			rows[i] = store.Row{Key: key, Value: v}
			continue
		}
		m := map[string]any{
			"amount": amount,
			"count":  count,
			"ratio":  store.FormatFloat(float64(i)/7, 64),
			"name":   name,
		}
		if caps.Text {
			m["note"] = "-"
		} else {
			m["note"] = nil
			if i%2 == 0 {
				m["note"] = fmt.Sprintf("note %d", i)
			}
			m["active"] = i%3 == 0
		}
		rows[i] = store.Row{Key: key, Value: m}
	}
	return rows
}

// Fields returns the fields of rows' values in a fixed order.
func Fields(rows []store.Row) []string {
	if len(rows) == 0 {
		return []string{"amount", "count", "ratio", "name", "note"}
	}
	m, _ := rows[0].Value.(map[string]any)
	var fields []string
	for _, f := range []string{"amount", "count", "ratio", "name", "note", "active"} {
		if _, ok := m[f]; ok {
			fields = append(fields, f)
		}
	}
	return fields
}

// Text renders a value as a CSV cell, a Redis string or hash field.
func Text(v any) string {
	switch v := v.(type) {
	case json.Number:
		return string(v)
	case string:
		return v
	case store.Text:
		return string(v)
	}
	panic(fmt.Sprintf("no text for %T", v))
}

// ReadBack returns the value a backend with caps reads back for a value
// of Rows: the value itself, or with Text its scalars as store.Text.
func ReadBack(v any, caps Caps) any {
	if !caps.Text {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for f, e := range v {
			m[f] = ReadBack(e, caps)
		}
		return m
	case nil:
		return nil
	}
	return store.Text(Text(v))
}

// Run checks the store.Store contract against one backend: 3,100 rows
// of every JSON type the backend holds read back exactly, Compare over
// them (typed expected values against the backend's own), Check,
// watermarks (configured and not), an empty store, a scan stopped by fn,
// and a cancelled context.
func Run(t *testing.T, b Backend) {
	// 3100 rows: past SCAN's COUNT, pipelines and read buffers.
	su := &suite{b: b, rows: Rows(3100, b.Caps), marks: map[string]uint64{"payments.0": 3100, "payments.1": 0, "orders-http": 1 << 40}}
	su.s = su.open(t, su.rows, su.marks)
	t.Run("rows", su.testRows)
	t.Run("compare", su.testCompare)
	t.Run("check", su.testCheck)
	t.Run("watermarks", su.testWatermarks)
	t.Run("empty", su.testEmpty)
	t.Run("stop", su.testStop)
	t.Run("cancel", su.testCancel)
}

// suite is one backend under test, holding the rows and watermarks it
// was given.
type suite struct {
	b     Backend
	s     store.Store
	rows  []store.Row
	marks map[string]uint64
}

// open opens a store of the backend holding rows (and reporting marks).
func (su *suite) open(t *testing.T, rows []store.Row, marks map[string]uint64) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), su.b.Open(t, rows, marks))
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// scanAll scans s, failing on a key seen twice.
func scanAll(t *testing.T, s store.Store) map[string]any {
	t.Helper()
	got := make(map[string]any)
	err := s.Scan(context.Background(), func(r store.Row) error {
		if _, dup := got[r.Key]; dup {
			return fmt.Errorf("key %q twice", r.Key)
		}
		got[r.Key] = r.Value
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

func (su *suite) testRows(t *testing.T) {

	got := scanAll(t, su.s)
	if len(got) != len(su.rows) {
		t.Errorf("Scan returned %d rows, want %d", len(got), len(su.rows))
	}
	bad := 0
	for _, r := range su.rows {
		want := ReadBack(r.Value, su.b.Caps)
		if v, ok := got[r.Key]; !ok || !reflect.DeepEqual(v, want) {
			if bad++; bad <= 3 {
				t.Errorf("key %q: got %#v (present %v), want %#v", r.Key, v, ok, want)
			}
		}
	}
}

func (su *suite) testCompare(t *testing.T) {
	ctx := context.Background()
	expected := make(map[string]any, len(su.rows))
	for _, r := range su.rows {
		expected[r.Key] = r.Value
	}
	// One value changed, one key gone: exactly two drifts.
	expected["acct-00005"] = "changed"
	expected["nobody"] = json.Number("1")
	var drifts []compare.Drift
	st, err := compare.Compare(ctx, su.s, expected, compare.Config{}, func(d compare.Drift) error {
		drifts = append(drifts, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := compare.Stats{Rows: 3100, Keys: 3101, Matched: 3099, Missing: 1, Mismatched: 1}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if len(drifts) != 2 || drifts[0].Kind != compare.DriftMismatch || drifts[0].Key != "acct-00005" || drifts[1].Kind != compare.DriftMissing || drifts[1].Key != "nobody" {
		t.Errorf("drifts %+v", drifts)
	}
}

func (su *suite) testCheck(t *testing.T) {
	ctx := context.Background()
	if err := su.s.Check(ctx); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := su.open(t, nil, nil).Check(ctx); err != nil {
		t.Errorf("Check of an empty store: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := su.s.Check(cctx); err != context.Canceled {
		t.Errorf("Check with a cancelled context: err %v, want %v", err, context.Canceled)
	}
	// A store with typed columns describes them, the key marked, without
	// reading a row.
	if sc, ok := su.s.(interface {
		Schema(context.Context) ([]store.Column, error)
	}); ok {
		cols, err := sc.Schema(ctx)
		if err != nil {
			t.Fatalf("Schema: %v", err)
		}
		keys := 0
		for _, c := range cols {
			if c.Key {
				keys++
			}
			if c.Name == "" || c.Type == "" || c.Kind == "" {
				t.Errorf("column %+v: want a name, a type and a kind", c)
			}
		}
		if keys != 1 || len(cols) != len(Fields(su.rows))+1 {
			t.Errorf("Schema = %+v: want %d columns, one of them the key", cols, len(Fields(su.rows))+1)
		}
	}
}

func (su *suite) testWatermarks(t *testing.T) {
	ctx := context.Background()
	got, ok, err := su.s.Watermarks(ctx)
	if err != nil || !ok || !reflect.DeepEqual(got, su.marks) {
		t.Errorf("Watermarks = %v, %v, %v; want %v, true, nil", got, ok, err, su.marks)
	}
	s := su.open(t, su.rows[:3], nil)
	if got, ok, err := s.Watermarks(ctx); err != nil || ok || got != nil {
		t.Errorf("Watermarks unconfigured = %v, %v, %v; want nil, false, nil", got, ok, err)
	}
}

func (su *suite) testEmpty(t *testing.T) {

	if got := scanAll(t, su.open(t, nil, nil)); len(got) != 0 {
		t.Errorf("empty store: %d rows", len(got))
	}
}

func (su *suite) testStop(t *testing.T) {
	ctx := context.Background()
	errStop := errors.New("stop")
	n := 0
	err := su.s.Scan(ctx, func(store.Row) error {
		if n++; n == 10 {
			return errStop
		}
		return nil
	})
	if err != errStop || n != 10 {
		t.Errorf("Scan stopped by fn: err %v after %d rows, want %v after 10", err, n, errStop)
	}
	// The store is still usable.
	if got := scanAll(t, su.s); len(got) != len(su.rows) {
		t.Errorf("Scan after a stop: %d rows, want %d", len(got), len(su.rows))
	}
}

func (su *suite) testCancel(t *testing.T) {
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := 0
	err := su.s.Scan(cctx, func(store.Row) error {
		if n++; n == 5 {
			cancel()
		}
		return nil
	})
	if err != context.Canceled || n >= len(su.rows) {
		t.Errorf("Scan cancelled: err %v after %d rows, want %v before the end", err, n, context.Canceled)
	}
	n = 0
	err = su.s.Scan(cctx, func(store.Row) error { n++; return nil })
	if err != context.Canceled || n != 0 {
		t.Errorf("Scan with a cancelled context: err %v after %d rows, want %v", err, n, context.Canceled)
	}
	if _, _, err := su.s.Watermarks(cctx); err != context.Canceled {
		t.Errorf("Watermarks with a cancelled context: err %v, want %v", err, context.Canceled)
	}
}

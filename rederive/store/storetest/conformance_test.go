package storetest

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/auditd/auditd/rederive/store"
)

// The store tests run against the real PostgreSQL and Redis of the test
// environment; AUDITD_TEST_PG (a DSN) and AUDITD_TEST_REDIS (host:port)
// point them elsewhere.

func storeBackends() []Backend {
	pgOpen := func(query bool) func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
		return func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
			conn := PostgresConn(t)
			table := PostgresTable(t, conn, "key text PRIMARY KEY, amount numeric(12,2), count bigint, ratio float8, name text, note text, active boolean")
			var lines []string
			for _, r := range rows {
				m := r.Value.(map[string]any)
				note := `\N`
				if s, ok := m["note"].(string); ok {
					note = s
				}
				lines = append(lines, strings.Join([]string{r.Key, Text(m["amount"]), Text(m["count"]),
					Text(m["ratio"]), Text(m["name"]), note, strconv.FormatBool(m["active"].(bool))}, "\t"))
			}
			Copy(t, conn, table, lines)
			c := &store.PostgresConfig{DSN: PostgresDSN(), Table: strings.Trim(table, `"`)}
			if query {
				// The key by name, not first, and renamed.
				c = &store.PostgresConfig{DSN: PostgresDSN(), KeyColumn: "k",
					Query: "SELECT amount, count, ratio, name, note, key AS k, active FROM " + table}
			}
			if marks != nil {
				mt := PostgresTable(t, conn, "log text, size bigint")
				var lines []string
				for log, size := range marks {
					lines = append(lines, fmt.Sprintf("%s\t%d", log, size))
				}
				Copy(t, conn, mt, lines)
				c.WatermarkQuery = "SELECT log, size FROM " + mt
			}
			return store.Config{Postgres: c}
		}
	}
	redisOpen := func(typ string) func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
		return func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
			client, prefix := RedisClient(t)
			ctx := context.Background()
			pipe := client.Pipeline()
			for _, r := range rows {
				k := prefix + "rows:" + r.Key
				switch typ {
				case "hash":
					for f, v := range r.Value.(map[string]any) {
						pipe.HSet(ctx, k, f, Text(v))
					}
				case "json":
					b, err := json.Marshal(r.Value)
					if err != nil {
						t.Fatal(err)
					}
					pipe.Set(ctx, k, b, 0)
				case "string":
					pipe.Set(ctx, k, Text(r.Value), 0)
				}
			}
			c := &store.RedisConfig{Addr: RedisAddr(), Pattern: store.EscapeGlob(prefix) + "rows:*", Prefix: prefix + "rows:", Type: typ}
			if marks != nil {
				c.WatermarkKey = prefix + "marks"
				for log, size := range marks {
					pipe.HSet(ctx, c.WatermarkKey, log, size)
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			return store.Config{Redis: c}
		}
	}
	fileMarks := func(t *testing.T, marks map[string]uint64) string {
		if marks == nil {
			return ""
		}
		p := filepath.Join(t.TempDir(), "marks.json")
		b, _ := json.Marshal(marks)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jsonObject := func(r store.Row, keyField string) map[string]any {
		m := map[string]any{keyField: r.Key}
		for f, v := range r.Value.(map[string]any) {
			m[f] = v
		}
		return m
	}
	httpOpen := func(ndjson bool) func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
		return func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /rows", func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer s3cr$t" {
					http.Error(w, "no token", http.StatusUnauthorized)
					return
				}
				bw := bufio.NewWriter(w)
				if ndjson {
					w.Header().Set("Content-Type", "application/x-ndjson")
				} else {
					w.Header().Set("Content-Type", "application/json")
					bw.WriteString("[\n")
				}
				for i, row := range rows {
					b, _ := json.Marshal(jsonObject(row, "id"))
					if !ndjson && i > 0 {
						bw.WriteString(",\n")
					}
					bw.Write(b)
					if ndjson {
						bw.WriteByte('\n')
					}
				}
				if !ndjson {
					bw.WriteString("\n]\n")
				}
				bw.Flush()
			})
			mux.HandleFunc("GET /marks", func(w http.ResponseWriter, r *http.Request) {
				json.NewEncoder(w).Encode(marks)
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c := &store.HTTPConfig{URL: srv.URL + "/rows", KeyField: "id", Headers: map[string]string{"Authorization": "Bearer ${AUDITD_TEST_STORE_TOKEN}"}}
			if marks != nil {
				c.WatermarkURL = srv.URL + "/marks"
			}
			return store.Config{HTTP: c}
		}
	}

	return []Backend{
		{Name: "postgres/table", Open: pgOpen(false)},
		{Name: "postgres/query", Open: pgOpen(true)},
		{Name: "redis/hash", Caps: Caps{Text: true}, Open: redisOpen("hash")},
		{Name: "redis/json", Open: redisOpen("json")},
		{Name: "redis/string", Caps: Caps{Scalar: true, Text: true}, Open: redisOpen("string")},
		{Name: "file/jsonl", Open: func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
			p := filepath.Join(t.TempDir(), "rows.jsonl")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			bw := bufio.NewWriter(f)
			for i, r := range rows {
				if i == 7 {
					bw.WriteString("\n  \n") // blank lines are skipped
				}
				b, _ := json.Marshal(jsonObject(r, "key"))
				bw.Write(b)
				bw.WriteByte('\n')
			}
			if err := bw.Flush(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			return store.Config{File: &store.FileConfig{Path: p, WatermarkPath: fileMarks(t, marks)}}
		}},
		{Name: "file/csv", Caps: Caps{Text: true}, Open: func(t *testing.T, rows []store.Row, marks map[string]uint64) store.Config {
			p := filepath.Join(t.TempDir(), "rows.csv")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			w := csv.NewWriter(f)
			fields := Fields(rows)
			w.Write(append([]string{"account"}, fields...))
			for _, r := range rows {
				rec := []string{r.Key}
				for _, f := range fields {
					rec = append(rec, Text(r.Value.(map[string]any)[f]))
				}
				w.Write(rec)
			}
			w.Flush()
			if err := w.Error(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			return store.Config{File: &store.FileConfig{Path: p, KeyField: "account", WatermarkPath: fileMarks(t, marks)}}
		}},
		{Name: "http/json", Open: httpOpen(false)},
		{Name: "http/ndjson", Open: httpOpen(true)},
	}
}

func TestStoreConformance(t *testing.T) {
	// The HTTP backends' token, read through ${VAR} expansion. Not
	// t.Setenv, which rules out parallel subtests; no other test reads it.
	os.Setenv("AUDITD_TEST_STORE_TOKEN", "s3cr$t")
	t.Cleanup(func() { os.Unsetenv("AUDITD_TEST_STORE_TOKEN") })
	for _, b := range storeBackends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			Run(t, b)
		})
	}
}

// TestStoreFailures checks that each way a store can fail is an ErrStore
// error saying where, and that Check finds, without reading the rows,
// each failure that shows before the first row.
func TestStoreFailures(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "database is down", http.StatusInternalServerError)
		case "/malformed":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"key": "a", "v": 1}, {"key": "b", "v": 2`))
		case "/not-object":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"key": "a", "v": 1}, 7]`))
		case "/trailing":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`[{"key": "a", "v": 1}] [`))
		case "/ndjson":
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Write([]byte("{\"key\": \"a\", \"v\": 1}\n{\"key\": \"b\" \"v\": 2}\n"))
		case "/marks":
			w.Write([]byte(`{"payments.0": -1}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	redisClient, prefix := RedisClient(t)
	redisClient.Set(ctx, prefix+"bad-json", `{"v": 1`, 0)
	redisClient.Set(ctx, prefix+"a-string", `7`, 0)
	redisClient.HSet(ctx, prefix+"marks", "payments.0", "many")

	conn := PostgresConn(t)
	table := PostgresTable(t, conn, "k text, v int")
	Copy(t, conn, table, []string{"a\t1", `\N` + "\t2"})

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	// The failures past the first row, which Check does not read.
	laterRows := map[string]bool{
		"postgres null key": true, "jsonl malformed line": true, "csv ragged": true,
		"http malformed json": true, "http element not an object": true,
		"http data after the array": true, "http malformed ndjson": true,
	}

	for _, tc := range []struct {
		name  string
		c     store.Config
		marks bool   // call Watermarks, not Scan
		want  string // in the message
	}{
		{"postgres unreachable", store.Config{Postgres: &store.PostgresConfig{DSN: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5", Table: "t"}}, false, "postgres 127.0.0.1:1/test"},
		{"postgres no table", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Table: Name("none")}}, false, "does not exist"},
		{"postgres no key column", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Query: "SELECT * FROM " + table, KeyColumn: "id"}}, false, `no key column "id"`},
		{"postgres null key", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Query: "SELECT * FROM " + table + " ORDER BY v"}}, false, `row 2: key column "k" is NULL`},
		{"postgres bad watermarks", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Table: "t", WatermarkQuery: "SELECT 'payments.0', -5::bigint"}}, true, "negative size"},
		{"redis unreachable", store.Config{Redis: &store.RedisConfig{Addr: "127.0.0.1:1", Pattern: "*"}}, false, "redis 127.0.0.1:1/0"},
		{"redis unreachable watermarks", store.Config{Redis: &store.RedisConfig{Addr: "127.0.0.1:1", Pattern: "*", WatermarkKey: "m"}}, true, "redis 127.0.0.1:1/0"},
		{"redis malformed json", store.Config{Redis: &store.RedisConfig{Addr: RedisAddr(), Pattern: store.EscapeGlob(prefix) + "bad-*", Prefix: prefix}}, false, `key "` + prefix + `bad-json": malformed JSON`},
		{"redis wrong type", store.Config{Redis: &store.RedisConfig{Addr: RedisAddr(), Pattern: store.EscapeGlob(prefix) + "a-*", Type: "hash"}}, false, "WRONGTYPE"},
		{"redis bad watermarks", store.Config{Redis: &store.RedisConfig{Addr: RedisAddr(), Pattern: "x", WatermarkKey: prefix + "marks"}}, true, `"many" is not a tree size`},
		{"file missing", store.Config{File: &store.FileConfig{Path: filepath.Join(dir, "none.jsonl")}}, false, "none.jsonl"},
		{"jsonl malformed line", store.Config{File: &store.FileConfig{Path: write("bad.jsonl", "{\"key\": \"a\", \"v\": 1}\n\n{\"key\": \"b\", \"v\": }\n")}}, false, "bad.jsonl: line 3: malformed JSON"},
		{"jsonl not an object", store.Config{File: &store.FileConfig{Path: write("array.jsonl", "[1, 2]\n")}}, false, "line 1: not a JSON object"},
		{"jsonl no key", store.Config{File: &store.FileConfig{Path: write("nokey.jsonl", "{\"id\": \"a\", \"v\": 1}\n")}}, false, `line 1: no key field "key"`},
		{"jsonl bad key", store.Config{File: &store.FileConfig{Path: write("objkey.jsonl", "{\"key\": {}, \"v\": 1}\n")}}, false, `line 1: key field "key" is not a string or a number`},
		{"jsonl two values on a line", store.Config{File: &store.FileConfig{Path: write("two.jsonl", "{\"key\": \"a\"} {\"key\": \"b\"}\n")}}, false, "line 1: malformed JSON"},
		{"csv ragged", store.Config{File: &store.FileConfig{Path: write("ragged.csv", "key,v\na,1\nb,2,3\n")}}, false, "line 3"},
		{"csv no key column", store.Config{File: &store.FileConfig{Path: write("nokey.csv", "id,v\na,1\n")}}, false, `line 1: no key column "key"`},
		{"csv empty", store.Config{File: &store.FileConfig{Path: write("empty.csv", "")}}, false, "no header row"},
		{"file bad watermarks", store.Config{File: &store.FileConfig{Path: write("ok.jsonl", ""), WatermarkPath: write("marks.json", `{"payments.0": 1.5}`)}}, true, "not a tree size"},
		{"file missing watermarks", store.Config{File: &store.FileConfig{Path: write("ok.jsonl", ""), WatermarkPath: filepath.Join(dir, "none.json")}}, true, "none.json"},
		{"http 500", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/500"}}, false, "/500: GET: status 500 Internal Server Error: database is down"},
		{"http 404", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/nothing"}}, false, "status 404"},
		{"http malformed json", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/malformed"}}, false, "element 1: malformed JSON"},
		{"http element not an object", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/not-object"}}, false, "element 1: not a JSON object"},
		{"http data after the array", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/trailing"}}, false, "data after the array"},
		{"http malformed ndjson", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/ndjson"}}, false, "line 2: malformed JSON"},
		{"http not an array", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/ndjson", Format: "json"}}, false, "want an array"},
		{"http unreachable", store.Config{HTTP: &store.HTTPConfig{URL: closed.URL + "/rows"}}, false, "connection refused"},
		{"http bad watermarks", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/rows", WatermarkURL: srv.URL + "/marks"}}, true, "not a tree size"},
		{"http watermarks 404", store.Config{HTTP: &store.HTTPConfig{URL: srv.URL + "/rows", WatermarkURL: srv.URL + "/none"}}, true, "status 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(ctx, tc.c)
			if err != nil {
				t.Fatalf("OpenStore: %v", err)
			}
			defer s.Close()
			if !tc.marks {
				cerr := s.Check(ctx)
				switch {
				case laterRows[tc.name] && cerr != nil:
					t.Errorf("Check = %v, want nil: the failure is past the first row", cerr)
				case !laterRows[tc.name] && (!errors.Is(cerr, store.ErrStore) || !strings.Contains(cerr.Error(), tc.want)):
					t.Errorf("Check = %v, want an ErrStore error saying %q", cerr, tc.want)
				}
			}
			if tc.marks {
				_, _, err = s.Watermarks(ctx)
			} else {
				err = s.Scan(ctx, func(store.Row) error { return nil })
			}
			if !errors.Is(err, store.ErrStore) {
				t.Fatalf("err %v, want an ErrStore error", err)
			}
			t.Logf("%v", err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestStoreOpenErrors checks configs store.Open refuses.
func TestStoreOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    store.Config
	}{
		{"none", store.Config{}},
		{"two", store.Config{File: &store.FileConfig{Path: "a.csv"}, HTTP: &store.HTTPConfig{URL: "http://x"}}},
		{"postgres bad dsn", store.Config{Postgres: &store.PostgresConfig{DSN: "postgres://u:secret@host:notaport/db", Table: "t"}}},
		{"postgres query and table", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Table: "t", Query: "SELECT 1"}}},
		{"postgres neither query nor table", store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN()}}},
		{"redis type", store.Config{Redis: &store.RedisConfig{Pattern: "*", Type: "list"}}},
		{"file format", store.Config{File: &store.FileConfig{Path: "rows.txt"}}},
		{"file unknown format", store.Config{File: &store.FileConfig{Path: "rows.csv", Format: "xml"}}},
		{"http format", store.Config{HTTP: &store.HTTPConfig{URL: "http://x", Format: "xml"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(context.Background(), tc.c)
			if !errors.Is(err, store.ErrStore) {
				t.Fatalf("OpenStore = %v, %v; want an ErrStore error", s, err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q repeats the password", err)
			}
		})
	}
}

// TestStorePostgresTypes checks the value of each PostgreSQL type.
func TestStorePostgresTypes(t *testing.T) {
	conn := PostgresConn(t)
	table := PostgresTable(t, conn, `id bigint, n numeric, n2 numeric(10,3), i2 smallint, f4 real, f8 double precision,
		b boolean, t text, vc varchar(10), j json, jb jsonb, ts timestamp, tstz timestamptz, d date, u uuid,
		by bytea, ia int[], na numeric[], ta text[], iv interval, nul text`)
	Exec(t, conn, `INSERT INTO `+table+` VALUES (42, 12.50, 1.5, -7, 0.1, 0.1,
		true, 'x', 'y', '{"a": 1.10, "b": [null, "s"]}', '{"big": 12345678901234567890}', '2024-05-01 10:00:00.5',
		'2024-05-01 12:00:00+02', '2024-05-01', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
		'\x00ff10', '{1,2}', '{1.50,NULL}', '{"a b",c}', '1 day 2 hours', NULL),
		(-1, 'NaN', 0, 0, 'Infinity', '-1e-7', false, '', '', 'null', '[]', 'infinity', '-infinity', '2024-01-01', NULL,
		'', '{}', '{}', '{}', '0', NULL)`)
	s, err := store.Open(context.Background(), store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Table: strings.Trim(table, `"`)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]any{}
	if err := s.Scan(context.Background(), func(r store.Row) error { got[r.Key] = r.Value; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"42": map[string]any{
			"n": json.Number("12.50"), "n2": json.Number("1.500"), "i2": json.Number("-7"),
			"f4": json.Number("0.1"), "f8": json.Number("0.1"), "b": true, "t": "x", "vc": "y",
			"j":    map[string]any{"a": json.Number("1.10"), "b": []any{nil, "s"}},
			"jb":   map[string]any{"big": json.Number("12345678901234567890")},
			"ts":   time.Date(2024, 5, 1, 10, 0, 0, 5e8, time.UTC),
			"tstz": time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC),
			"d":    "2024-05-01",
			"u":    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
			"by":   "AP8Q",
			"ia":   []any{json.Number("1"), json.Number("2")},
			"na":   []any{json.Number("1.50"), nil},
			"ta":   []any{"a b", "c"},
			"iv":   "1 day 02:00:00",
			"nul":  nil,
		},
		"-1": map[string]any{
			"n": "NaN", "n2": json.Number("0.000"), "i2": json.Number("0"),
			"f4": "Infinity", "f8": json.Number("-1e-7"), "b": false, "t": "", "vc": "",
			"j": nil, "jb": []any{}, "ts": "infinity", "tstz": "-infinity", "d": "2024-01-01", "u": nil,
			"by": "", "ia": []any{}, "na": []any{}, "ta": []any{}, "iv": "00:00:00", "nul": nil,
		},
	}
	for k, w := range want {
		g := got[k].(map[string]any)
		for f, wv := range w.(map[string]any) {
			if gv := g[f]; !reflect.DeepEqual(gv, wv) {
				t.Errorf("key %s column %s: got %#v, want %#v", k, f, gv, wv)
			}
		}
		if len(g) != len(w.(map[string]any)) {
			t.Errorf("key %s: %d columns, want %d", k, len(g), len(w.(map[string]any)))
		}
	}
	if len(got) != 2 {
		t.Errorf("got %d rows, want 2", len(got))
	}

	// One value column: the value itself; a uuid key by its text.
	s2, err := store.Open(context.Background(), store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(),
		Query: "SELECT u, n FROM " + table + " WHERE u IS NOT NULL"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var rows []store.Row
	if err := s2.Scan(context.Background(), func(r store.Row) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if w := []store.Row{{Key: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", Value: json.Number("12.50")}}; !reflect.DeepEqual(rows, w) {
		t.Errorf("got %#v, want %#v", rows, w)
	}
}

// TestStorePostgresCheck checks that Check and Schema describe the query
// without running it, and give each column's type and kind.
func TestStorePostgresCheck(t *testing.T) {
	ctx := context.Background()
	conn := PostgresConn(t)
	enum := pgx.Identifier{Name("mood")}.Sanitize()
	Exec(t, conn, "CREATE TYPE "+enum+" AS ENUM ('ok', 'sad')")
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP TYPE IF EXISTS "+enum+" CASCADE") })
	table := PostgresTable(t, conn, `id text, cents bigint, amount numeric(12,2), ratio float8, name varchar(20), ok boolean,
		at timestamptz, at_utc timestamp, day date, doc jsonb, tags text[], raw bytea, u uuid, m `+enum)
	var lines []string
	for i := range 2000 {
		lines = append(lines, fmt.Sprintf("k%d\t%d\t1.50\t0.5\tn\tt\t2024-05-01 10:00:00+00\t2024-05-01 10:00:00\t2024-05-01\t{}\t{a}\t\\\\x00\ta0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\tok", i, i))
	}
	Copy(t, conn, table, lines)
	open := func(query string) store.Store {
		s, err := store.Open(ctx, store.Config{Postgres: &store.PostgresConfig{DSN: PostgresDSN(), Query: query, KeyColumn: "id"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	type schemaStore interface {
		Schema(context.Context) ([]store.Column, error)
	}

	s := open("SELECT * FROM " + table)
	cols, err := s.(schemaStore).Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Column{
		{Name: "id", Type: "text", Kind: store.ColumnText, Key: true},
		{Name: "cents", Type: "int8", Kind: store.ColumnNumber},
		{Name: "amount", Type: "numeric", Kind: store.ColumnNumber},
		{Name: "ratio", Type: "float8", Kind: store.ColumnNumber},
		{Name: "name", Type: "varchar", Kind: store.ColumnText},
		{Name: "ok", Type: "bool", Kind: store.ColumnBool},
		{Name: "at", Type: "timestamptz", Kind: store.ColumnTime},
		{Name: "at_utc", Type: "timestamp", Kind: store.ColumnTime},
		{Name: "day", Type: "date", Kind: store.ColumnString},
		{Name: "doc", Type: "jsonb", Kind: store.ColumnAny},
		{Name: "tags", Type: "_text", Kind: store.ColumnList},
		{Name: "raw", Type: "bytea", Kind: store.ColumnBytes},
		{Name: "u", Type: "uuid", Kind: store.ColumnString},
		{Name: "m", Type: strings.Trim(enum, `"`), Kind: store.ColumnAny},
	}
	if !reflect.DeepEqual(cols, want) {
		t.Errorf("Schema =\n%+v\nwant\n%+v", cols, want)
	}

	// Neither runs the query: one that fails on its first row, or sleeps
	// for a minute, checks in an instant; Scan runs it.
	bad := open("SELECT id, 1 / (cents - cents) AS v FROM " + table)
	if err := bad.Check(ctx); err != nil {
		t.Errorf("Check of a query that fails when run: %v", err)
	}
	if err := bad.Scan(ctx, func(store.Row) error { return nil }); !errors.Is(err, store.ErrStore) || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("Scan of a query that fails when run: %v", err)
	}
	start := time.Now()
	if err := open("SELECT id, cents FROM " + table + ", pg_sleep(60)").Check(ctx); err != nil {
		t.Errorf("Check of a slow query: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Check of a slow query took %v: it ran the query", d)
	}

	// What it finds, as Scan would, before any row.
	for _, tc := range []struct{ query, want string }{
		{"SELECT id, cents FROM " + Name("none"), "does not exist"},
		{"SELECT cents, nope FROM " + table, `column "nope" does not exist`},
		{"SELECT cents FROM " + table, `no key column "id"`},
		{"SELECT id, cents AS id FROM " + table, `column "id" appears twice`},
		{"SELEC id FROM " + table, "syntax error"},
	} {
		err := open(tc.query).Check(ctx)
		if !errors.Is(err, store.ErrStore) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%s) = %v, want an ErrStore error saying %q", tc.query, err, tc.want)
		}
	}
}

package store

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgStore reads rows of a PostgreSQL query.
//
// Rows are read in the text format and turned into values by column type:
//
//   - smallint, integer, bigint, oid, numeric: json.Number of PostgreSQL's
//     text, so numeric(12,2) 12.50 is "12.50" (numeric NaN and ±Infinity
//     are the strings "NaN", "Infinity", "-Infinity");
//   - real, double precision: json.Number of the shortest text that reads
//     back as the float (float4 as a float32), written as encoding/json
//     writes floats; NaN and ±Infinity as the strings above;
//   - boolean: bool; json, jsonb: the decoded JSON value, numbers as
//     json.Number;
//   - timestamptz: a time.Time in UTC, the instant; timestamp (without
//     time zone) likewise, its wall clock read as UTC; ±infinity and BC
//     times as PostgreSQL's text, a string;
//   - bytea: the standard base64 of the bytes, as encoding/json writes
//     []byte;
//   - arrays: []any of the element values;
//   - NULL: nil;
//   - anything else (text, varchar, uuid, date, time, interval, inet, enums,
//     ...): PostgreSQL's text, a string.
//
// The session runs with DateStyle ISO, TimeZone UTC, bytea_output hex and
// extra_float_digits 3, whatever the server's defaults, so a query that
// renders those types itself sees the same settings.
//
// Each Scan, Check, Schema and Watermarks call opens its own connection
// and closes it when done, so a store outlives server restarts and holds
// nothing between runs.
type pgStore struct {
	cfg     *pgx.ConnConfig
	name    string // for messages; never the DSN, which may hold a password
	query   string
	keyCol  string
	wmQuery string
}

var (
	_ Store = (*pgStore)(nil)
	// The optional method package compare looks for to check the
	// columns' types against the expected values before reading a row.
	_ interface {
		Schema(context.Context) ([]Column, error)
	} = (*pgStore)(nil)
)

func openPostgres(c PostgresConfig) (*pgStore, error) {
	dsn, err := expandEnvSet("postgres dsn", c.DSN)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN: do not repeat it.
		return nil, fmt.Errorf("%w: postgres: invalid dsn", ErrStore)
	}
	name := fmt.Sprintf("postgres %s/%s", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database)
	query := c.Query
	switch {
	case c.Query != "" && c.Table != "":
		return nil, fmt.Errorf("%w: %s: both query and table are set", ErrStore, name)
	case c.Table != "":
		query = "SELECT * FROM " + pgx.Identifier(strings.Split(c.Table, ".")).Sanitize()
	case c.Query == "":
		return nil, fmt.Errorf("%w: %s: neither query nor table is set", ErrStore, name)
	}
	for k, v := range map[string]string{
		"DateStyle":          "ISO, MDY",
		"TimeZone":           "UTC",
		"bytea_output":       "hex",
		"extra_float_digits": "3",
	} {
		cc.RuntimeParams[k] = v
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "auditd"
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 30 * time.Second
	}
	return &pgStore{cfg: cc, name: name, query: query, keyCol: c.KeyColumn, wmQuery: c.WatermarkQuery}, nil
}

func (s *pgStore) Close() error { return nil }

// connect opens a connection for one call. The caller closes it.
func (s *pgStore) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	return conn, nil
}

// close closes a call's connection. A connection left mid-result (a scan
// that stopped early) is dropped without reading the rest of the result.
func (s *pgStore) close(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Close(ctx)
}

func (s *pgStore) Scan(ctx context.Context, fn func(Row) error) error {
	return s.scanQuery(ctx, s.query, nil, fn)
}

// scanQuery runs sql (the store's query, or one that selects the same
// columns from it) with args and calls fn with each row, as Scan does.
func (s *pgStore) scanQuery(ctx context.Context, sql string, args []any, fn func(Row) error) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close(conn)
	return s.scanConn(ctx, conn, sql, args, fn)
}

// scanConn is scanQuery on a connection of the caller's.
func (s *pgStore) scanConn(ctx context.Context, conn *pgx.Conn, sql string, args []any, fn func(Row) error) (err error) {
	// Stopping early cancels the query rather than reading the rest of
	// the result to finish it.
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows, err := conn.Query(qctx, sql, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return storeError(ctx, s.name, err)
	}
	defer func() {
		if err != nil {
			cancel()
		}
		rows.Close()
	}()

	fds := rows.FieldDescriptions()
	if len(fds) == 0 {
		// A query that failed before its first row has no columns yet:
		// its error says why.
		rows.Close()
		if err := rows.Err(); err != nil {
			return storeError(ctx, s.name, err)
		}
	}
	cols, keyIdx, err := s.columns(fds)
	if err != nil {
		return storeError(ctx, s.name, err)
	}
	tm := conn.TypeMap()

	// A row's strings are cut from one string of all its columns' text:
	// one allocation per row, not one per column.
	var buf []byte
	text := make([]string, len(cols))
	var n int64
	for rows.Next() {
		n++
		if n&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		raw := rows.RawValues()
		buf = buf[:0]
		for _, b := range raw {
			buf = append(buf, b...)
		}
		all, off := string(buf), 0
		for i, b := range raw {
			text[i] = all[off : off+len(b)]
			off += len(b)
		}
		if raw[keyIdx] == nil {
			return storeError(ctx, s.name, fmt.Errorf("row %d: key column %q is NULL", n, cols[keyIdx].name))
		}
		key, err := pgKey(tm, cols[keyIdx].oid, raw[keyIdx], text[keyIdx])
		if err != nil {
			return storeError(ctx, s.name, fmt.Errorf("row %d: key column %q: %w", n, cols[keyIdx].name, err))
		}
		var value any
		if len(cols) == 2 {
			i := 1 - keyIdx
			if value, err = pgValue(tm, cols[i].oid, raw[i], text[i]); err != nil {
				return storeError(ctx, s.name, fmt.Errorf("row %d (key %q): column %q: %w", n, key, cols[i].name, err))
			}
		} else {
			m := make(map[string]any, len(cols)-1)
			for i, col := range cols {
				if i == keyIdx {
					continue
				}
				if m[col.name], err = pgValue(tm, col.oid, raw[i], text[i]); err != nil {
					return storeError(ctx, s.name, fmt.Errorf("row %d (key %q): column %q: %w", n, key, col.name, err))
				}
			}
			value = m
		}
		if err := fn(Row{Key: key, Value: value}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return storeError(ctx, s.name, fmt.Errorf("after %d rows: %w", n, err))
	}
	return nil
}

type pgColumn struct {
	name string
	oid  uint32
}

// columns reads a result's columns and finds the key column among them.
func (s *pgStore) columns(fds []pgconn.FieldDescription) ([]pgColumn, int, error) {
	cols := make([]pgColumn, len(fds))
	keyIdx := -1
	for i, fd := range fds {
		cols[i] = pgColumn{name: fd.Name, oid: fd.DataTypeOID}
		if keyIdx < 0 && (s.keyCol == "" && i == 0 || fd.Name == s.keyCol) {
			keyIdx = i
		}
		for _, prev := range cols[:i] {
			if prev.name == fd.Name {
				return nil, 0, fmt.Errorf("column %q appears twice in the result", fd.Name)
			}
		}
	}
	if keyIdx < 0 {
		if len(fds) == 0 {
			return nil, 0, errors.New("the query returns no columns")
		}
		return nil, 0, fmt.Errorf("no key column %q in the result", s.keyCol)
	}
	return cols, keyIdx, nil
}

// Check connects and describes the query (PostgreSQL parses and analyzes
// it, and names its result's columns) without running it: a missing
// table or column, a syntax error or a missing key column is an ErrStore
// error here, before any fold.
func (s *pgStore) Check(ctx context.Context) error {
	_, err := s.Schema(ctx)
	return err
}

// Schema connects, describes the query without running it, and returns
// its result's columns in order, the key column marked. Errors are as
// Check's.
func (s *pgStore) Schema(ctx context.Context) ([]Column, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close(conn)
	// The unnamed statement: described, never executed, nothing left
	// prepared on the server.
	sd, err := conn.PgConn().Prepare(ctx, "", s.query, nil)
	if err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	cols, keyIdx, err := s.columns(sd.Fields)
	if err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	tm := conn.TypeMap()
	out := make([]Column, len(cols))
	var unknown []uint32
	for i, c := range cols {
		out[i] = Column{Name: c.name, Kind: pgKind(tm, c.oid), Key: i == keyIdx}
		if t, ok := tm.TypeForOID(c.oid); ok {
			out[i].Type = t.Name
		} else {
			unknown = append(unknown, c.oid)
		}
	}
	if len(unknown) > 0 {
		// User-defined types (enums, composites): their names, for
		// messages.
		names := make(map[uint32]string)
		rows, err := conn.Query(ctx, "SELECT oid, format_type(oid, NULL) FROM pg_catalog.pg_type WHERE oid = ANY($1)", unknown)
		if err == nil {
			var oid uint32
			var name string
			_, err = pgx.ForEachRow(rows, []any{&oid, &name}, func() error { names[oid] = name; return nil })
		}
		if err != nil {
			return nil, storeError(ctx, s.name, fmt.Errorf("type names: %w", err))
		}
		for i, c := range cols {
			if out[i].Type == "" {
				out[i].Type = names[c.oid]
				if out[i].Type == "" {
					out[i].Type = fmt.Sprintf("oid %d", c.oid)
				}
			}
		}
	}
	return out, nil
}

// pgKind says what values pgValue gives for a column of type oid.
func pgKind(tm *pgtype.Map, oid uint32) ColumnKind {
	switch oid {
	case pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID, pgtype.OIDOID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
		return ColumnNumber
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.QCharOID:
		return ColumnText
	case pgtype.BoolOID:
		return ColumnBool
	case pgtype.TimestamptzOID, pgtype.TimestampOID:
		return ColumnTime
	case pgtype.ByteaOID:
		return ColumnBytes
	case pgtype.DateOID, pgtype.TimeOID, pgtype.IntervalOID, pgtype.UUIDOID, pgtype.InetOID, pgtype.CIDROID,
		pgtype.MacaddrOID, pgtype.XMLOID, pgtype.BitOID, pgtype.VarbitOID, pgtype.TIDOID, pgtype.XIDOID, pgtype.CIDOID:
		return ColumnString
	case pgtype.JSONOID, pgtype.JSONBOID:
		return ColumnAny
	}
	if t, ok := tm.TypeForOID(oid); ok {
		if _, isArray := t.Codec.(*pgtype.ArrayCodec); isArray {
			return ColumnList
		}
	}
	return ColumnAny
}

func (s *pgStore) Watermarks(ctx context.Context) (map[string]uint64, bool, error) {
	if s.wmQuery == "" {
		return nil, false, nil
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, true, err
	}
	defer s.close(conn)
	rows, err := conn.Query(ctx, s.wmQuery)
	if err != nil {
		return nil, true, storeError(ctx, s.name, fmt.Errorf("watermark query: %w", err))
	}
	defer rows.Close()
	marks := make(map[string]uint64)
	for rows.Next() {
		var log string
		var size int64
		if err := rows.Scan(&log, &size); err != nil {
			return nil, true, storeError(ctx, s.name, fmt.Errorf("watermark query: row %d: %w", len(marks)+1, err))
		}
		if size < 0 {
			return nil, true, storeError(ctx, s.name, fmt.Errorf("watermark query: log %q: negative size %d", log, size))
		}
		marks[log] = uint64(size)
	}
	if err := rows.Err(); err != nil {
		return nil, true, storeError(ctx, s.name, fmt.Errorf("watermark query: %w", err))
	}
	return marks, true, nil
}

// pgKey renders a key column as a key: the text of its value when that is
// a string, a number (an integer key 42 is "42") or a boolean, else
// PostgreSQL's text of it.
func pgKey(tm *pgtype.Map, oid uint32, raw []byte, text string) (string, error) {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID, pgtype.NumericOID, pgtype.UUIDOID:
		return text, nil
	}
	v, err := pgValue(tm, oid, raw, text)
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return string(v), nil
	case bool:
		return strconv.FormatBool(v), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	}
	return text, nil
}

// pgValue turns a column's text (raw nil for NULL; text is raw as a
// string) into a value, as the pgStore comment describes.
func pgValue(tm *pgtype.Map, oid uint32, raw []byte, text string) (any, error) {
	if raw == nil {
		return nil, nil
	}
	switch oid {
	case pgtype.Int8OID, pgtype.Int4OID, pgtype.Int2OID, pgtype.OIDOID:
		return json.Number(text), nil
	case pgtype.NumericOID:
		if len(raw) > 0 && (raw[0] == 'N' || raw[0] == 'I' || raw[0] == '-' && len(raw) > 1 && raw[1] == 'I') {
			return text, nil // NaN, Infinity, -Infinity
		}
		return json.Number(text), nil
	case pgtype.TextOID, pgtype.VarcharOID:
		return text, nil
	case pgtype.Float8OID, pgtype.Float4OID:
		bits := 64
		if oid == pgtype.Float4OID {
			bits = 32
		}
		f, err := strconv.ParseFloat(text, bits)
		if err != nil {
			return nil, err
		}
		return FormatFloat(f, bits), nil
	case pgtype.BoolOID:
		return len(raw) == 1 && raw[0] == 't', nil
	case pgtype.JSONOID, pgtype.JSONBOID:
		return DecodeJSON(raw)
	case pgtype.TimestamptzOID:
		return pgTime("2006-01-02 15:04:05.999999999Z07", text), nil
	case pgtype.TimestampOID:
		return pgTime("2006-01-02 15:04:05.999999999", text), nil
	case pgtype.ByteaOID:
		if len(raw) < 2 || raw[0] != '\\' || raw[1] != 'x' {
			return nil, errors.New("bytea is not in the hex format")
		}
		b := make([]byte, hex.DecodedLen(len(raw)-2))
		if _, err := hex.Decode(b, raw[2:]); err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	if t, ok := tm.TypeForOID(oid); ok {
		if _, isArray := t.Codec.(*pgtype.ArrayCodec); isArray {
			v, err := t.Codec.DecodeValue(tm, oid, pgtype.TextFormatCode, raw)
			if err != nil {
				return nil, err
			}
			return pgGoValue(v), nil
		}
	}
	return text, nil
}

// pgTime reads a timestamp's text (DateStyle ISO, TimeZone UTC) as a
// time.Time in UTC, or returns the text itself when it is no such time
// (infinity, BC).
func pgTime(layout, text string) any {
	t, err := time.Parse(layout, text)
	if err != nil {
		return text
	}
	return t.UTC()
}

// pgGoValue turns a value pgtype decoded (array elements) into a value as
// pgValue would have.
func pgGoValue(v any) any {
	switch v := v.(type) {
	case nil, bool, string:
		return v
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = pgGoValue(e)
		}
		return out
	case int16:
		return json.Number(strconv.FormatInt(int64(v), 10))
	case int32:
		return json.Number(strconv.FormatInt(int64(v), 10))
	case int64:
		return json.Number(strconv.FormatInt(v, 10))
	case uint32:
		return json.Number(strconv.FormatUint(uint64(v), 10))
	case float32:
		return FormatFloat(float64(v), 32)
	case float64:
		return FormatFloat(v, 64)
	case pgtype.Numeric:
		b, err := v.MarshalJSON()
		if err != nil {
			return fmt.Sprint(v)
		}
		if len(b) > 0 && b[0] == '"' {
			return strings.Trim(string(b), `"`)
		}
		return json.Number(b)
	case time.Time:
		return v.UTC()
	case pgtype.InfinityModifier:
		return v.String()
	case [16]byte:
		return pgtype.UUID{Bytes: v, Valid: true}.String()
	case []byte:
		return base64.StdEncoding.EncodeToString(v)
	case map[string]any:
		for k, e := range v {
			v[k] = pgGoValue(e)
		}
		return v
	case json.Marshaler:
		b, err := v.MarshalJSON()
		if err == nil {
			if j, err := DecodeJSON(b); err == nil {
				return j
			}
		}
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(v)
}

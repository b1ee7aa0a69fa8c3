package store

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

var _ Summer = (*pgStore)(nil)

// pgSumPlan is the SQL that writes and hashes the rows of a store's query
// (see the comment on KeyRange's file for the text).
type pgSumPlan struct {
	layout SumLayout
	key    string // the key as text, collation "C", over the query aliased q
	text   string // the row's canonical text
}

// hashProbe is hashed by the server and by HashText when a plan is made:
// a server that hashes otherwise (a big-endian machine) cannot be summed.
const hashProbe = "auditd: é 中 \U0001F600 hashtextextended"

// sumPlan describes the store's query on conn and writes the plan, or
// returns an ErrNoSums error saying why the rows cannot be summed.
func (s *pgStore) sumPlan(ctx context.Context, conn *pgx.Conn) (*pgSumPlan, error) {
	var enc string
	if err := conn.QueryRow(ctx, "SHOW server_encoding").Scan(&enc); err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	if enc != "UTF8" {
		return nil, fmt.Errorf("%w: %s: the database's encoding is %s, not UTF8", ErrNoSums, s.name, enc)
	}
	const seed = 0x5eed_0f_a0d17d
	var h int64
	if err := conn.QueryRow(ctx, "SELECT hashtextextended($1::text COLLATE \"C\", $2)", hashProbe, int64(seed)).Scan(&h); err != nil {
		return nil, fmt.Errorf("%w: %s: hashtextextended: %w", ErrNoSums, s.name, err)
	}
	if uint64(h) != HashText([]byte(hashProbe), seed) {
		return nil, fmt.Errorf("%w: %s: the server hashes text otherwise than auditd does", ErrNoSums, s.name)
	}
	// The sums' expressions are large (a binary search over thousands of
	// bounds): compiling them with JIT would take longer than the scan.
	// (width_bucket over a text[] of the bounds would be one parameter,
	// but for text it walks the array from its first element for each
	// row: a scan of 10M rows with 9,765 bounds took 306 s.)
	// The planner takes the buckets for as many as the keys (a bucket is
	// an expression of the key) and would group by an external sort of
	// every row; there are at most a few tens of thousands of buckets, which
	// a hash aggregate holds in memory.
	for _, set := range []string{"SET jit = off", "SET enable_sort = off"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			return nil, storeError(ctx, s.name, err)
		}
	}
	sd, err := conn.PgConn().Prepare(ctx, "", s.query, nil)
	if err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	cols, keyIdx, err := s.columns(sd.Fields)
	if err != nil {
		return nil, storeError(ctx, s.name, err)
	}
	p := &pgSumPlan{}
	kc := "q." + pgx.Identifier{cols[keyIdx].name}.Sanitize()
	switch cols[keyIdx].oid {
	case pgtype.TextOID, pgtype.VarcharOID:
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID, pgtype.UUIDOID:
		kc = "(" + kc + ")::text"
	default:
		return nil, fmt.Errorf("%w: %s: the key column %q is not text, an integer, numeric or uuid", ErrNoSums, s.name, cols[keyIdx].name)
	}
	p.key = kc + ` COLLATE "C"`

	var vals []pgColumn
	for i, c := range cols {
		if i != keyIdx {
			vals = append(vals, c)
		}
	}
	slices.SortFunc(vals, func(a, b pgColumn) int { return strings.Compare(a.name, b.name) })
	p.layout.Single = len(vals) == 1
	var text strings.Builder
	text.WriteString("octet_length(" + kc + ") || ':' || " + kc)
	for _, c := range vals {
		expr, ok := pgScalarText("q."+pgx.Identifier{c.name}.Sanitize(), c.oid)
		if !ok {
			return nil, fmt.Errorf("%w: %s: column %q has a type whose values cannot be summed", ErrNoSums, s.name, c.name)
		}
		text.WriteString(" || ")
		if !p.layout.Single {
			text.WriteString(pgLiteral("c"+strconv.Itoa(len(c.name))+":"+c.name) + " || ")
		}
		text.WriteString(expr)
		p.layout.Columns = append(p.layout.Columns, c.name)
	}
	p.text = text.String()
	return p, nil
}

// pgScalarText is the SQL writing the scalar text of column c of type
// oid, false when the type writes "?" for every value.
func pgScalarText(c string, oid uint32) (string, bool) {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID:
		return "COALESCE('n' || " + c + "::text || ';', 'Z')", true
	case pgtype.NumericOID:
		// NaN sorts above Infinity.
		return "(CASE WHEN " + c + " IS NULL THEN 'Z' WHEN " + c + " > '-Infinity' AND " + c + " < 'Infinity' THEN 'n' || trim_scale(" + c + ")::text || ';' ELSE '?' END)", true
	case pgtype.TextOID, pgtype.VarcharOID:
		return "COALESCE('s' || octet_length(" + c + ") || ':' || " + c + ", 'Z')", true
	case pgtype.UUIDOID, pgtype.DateOID, pgtype.TimeOID, pgtype.IntervalOID, pgtype.InetOID, pgtype.CIDROID, pgtype.MacaddrOID:
		return "COALESCE('s' || octet_length(" + c + "::text) || ':' || " + c + "::text, 'Z')", true
	case pgtype.BoolOID:
		return "(CASE WHEN " + c + " THEN 'T' WHEN NOT " + c + " THEN 'F' ELSE 'Z' END)", true
	}
	return "", false
}

// pgLiteral quotes s as an SQL string literal.
func pgLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// SumLayout implements Summer.
func (s *pgStore) SumLayout(ctx context.Context) (SumLayout, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return SumLayout{}, err
	}
	defer s.close(conn)
	p, err := s.sumPlan(ctx, conn)
	if err != nil {
		return SumLayout{}, err
	}
	return p.layout, nil
}

// sqlArgs collects the arguments of a statement, numbered $1, $2, ...
type sqlArgs []any

// text adds v and returns its placeholder, typed text.
func (a *sqlArgs) text(v string) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a)) + "::text"
}

// bigint adds v and returns its placeholder, typed bigint.
func (a *sqlArgs) bigint(v int64) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a)) + "::bigint"
}

// rangeWhere returns a condition that holds for the keys within ranges:
// an OR of range conditions, which PostgreSQL answers with one index
// scan per range when the key is indexed in collation "C", or one
// sequential scan otherwise.
func rangeWhere(key string, ranges []KeyRange, args *sqlArgs) string {
	if len(ranges) == 0 {
		return "false"
	}
	var or []string
	for _, r := range ranges {
		c := key + " >= " + args.text(r.Lo)
		if !r.Open {
			c += " AND " + key + " < " + args.text(r.Hi)
		}
		or = append(or, "("+c+")")
	}
	return strings.Join(or, " OR ")
}

// bucketSQL returns an expression giving the bucket of key among bounds
// (as Sums numbers them) by binary search: a tree of CASE expressions,
// so a row costs log2(len(bounds)) comparisons.
func bucketSQL(key string, bounds []string, args *sqlArgs) string {
	var build func(lo, hi int) string
	build = func(lo, hi int) string {
		if lo == hi {
			return strconv.Itoa(lo)
		}
		mid := (lo + hi + 1) / 2 // buckets [lo, mid-1] are below bounds[mid-1]
		return "CASE WHEN " + key + " < " + args.text(bounds[mid-1]) + " THEN " + build(lo, mid-1) + " ELSE " + build(mid, hi) + " END"
	}
	return build(0, len(bounds))
}

// maxSumParams bounds the bounds and ranges of one Sums or ScanRanges
// call (PostgreSQL takes at most 65,535 parameters).
const maxSumParams = 60_000

// Sums implements Summer.
func (s *pgStore) Sums(ctx context.Context, within []KeyRange, bounds []string, seed uint64) ([]RangeSum, error) {
	if len(bounds)+2*len(within) > maxSumParams {
		return nil, fmt.Errorf("%w: %s: sums: %d bounds and %d ranges are too many for one query", ErrStore, s.name, len(bounds), len(within))
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close(conn)
	p, err := s.sumPlan(ctx, conn)
	if err != nil {
		return nil, err
	}
	var args sqlArgs
	sql := "SELECT b, count(*), sum(h)::text FROM (SELECT " + bucketSQL(p.key, bounds, &args) + " AS b, hashtextextended((" + p.text + `) COLLATE "C", ` + args.bigint(int64(seed)) + ") AS h FROM (" + s.query + ") q"
	if within != nil {
		sql += " WHERE " + rangeWhere(p.key, within, &args)
	}
	sql += ") s GROUP BY b"
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
	}
	defer rows.Close()
	out := make([]RangeSum, len(bounds)+1)
	var b, n int64
	var sum string
	for rows.Next() {
		if err := rows.Scan(&b, &n, &sum); err != nil {
			return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
		}
		v, ok := new(big.Int).SetString(sum, 10)
		if !ok || b < 0 || b > int64(len(bounds)) || v.BitLen() > 127 {
			return nil, storeError(ctx, s.name, fmt.Errorf("sums: bucket %d: sum %q", b, sum))
		}
		if v.Sign() < 0 { // two's complement
			v.Add(v, new(big.Int).Lsh(big.NewInt(1), 128))
		}
		lo := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0)))
		out[b] = RangeSum{Rows: n, Hi: new(big.Int).Rsh(v, 64).Uint64(), Lo: lo.Uint64()}
	}
	if err := rows.Err(); err != nil {
		return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
	}
	return out, nil
}

// ScanRanges implements Summer.
func (s *pgStore) ScanRanges(ctx context.Context, ranges []KeyRange, fn func(Row) error) error {
	if 2*len(ranges) > maxSumParams {
		return fmt.Errorf("%w: %s: %d ranges are too many for one query", ErrStore, s.name, len(ranges))
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer s.close(conn)
	p, err := s.sumPlan(ctx, conn)
	if err != nil {
		return err
	}
	var args sqlArgs
	where := rangeWhere(p.key, ranges, &args)
	return s.scanConn(ctx, conn, "SELECT q.* FROM ("+s.query+") q WHERE "+where, args, fn)
}

var _ KeyReader = (*pgStore)(nil)

// ScanKeys implements KeyReader: one query for all keys, which
// PostgreSQL answers from an index on the key column when there is one.
// A key column of another type than text, an integer, numeric or uuid is
// an ErrNoSums error.
func (s *pgStore) ScanKeys(ctx context.Context, keys []string, fn func(Row) error) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	sd, err := conn.PgConn().Prepare(ctx, "", s.query, nil)
	if err != nil {
		s.close(conn)
		return storeError(ctx, s.name, err)
	}
	cols, keyIdx, err := s.columns(sd.Fields)
	if err != nil {
		s.close(conn)
		return storeError(ctx, s.name, err)
	}
	defer s.close(conn)
	kc := "q." + pgx.Identifier{cols[keyIdx].name}.Sanitize()
	switch cols[keyIdx].oid {
	case pgtype.TextOID, pgtype.VarcharOID:
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID, pgtype.UUIDOID:
		kc += "::text"
	default:
		return fmt.Errorf("%w: %s: the key column %q is not text, an integer, numeric or uuid", ErrNoSums, s.name, cols[keyIdx].name)
	}
	if keys == nil {
		keys = []string{}
	}
	return s.scanConn(ctx, conn, "SELECT q.* FROM ("+s.query+") q WHERE "+kc+" = ANY($1::text[])", []any{keys}, fn)
}

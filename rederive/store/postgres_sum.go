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
// (see the comment at the top of checksum.go for the text and the hash).
type pgSumPlan struct {
	layout SumLayout
	key    string // the key as text, collation "C", over the query aliased q
	text   string // the row's value text
	// numeric is the one value column with layout.Numeric.
	numeric string
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
	// A bucket is an expression of the key: the planner takes the
	// buckets for as many as the keys and would group by an external sort
	// of every row. There are at most 2^MaxSumBits buckets, which a hash
	// aggregate holds in memory (work_mem, lest it spill to disk). JIT
	// compiles the expressions for longer than it saves.
	for _, set := range []string{"SET jit = off", "SET enable_sort = off", "SET work_mem = '256MB'"} {
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
	for i, c := range vals {
		expr, ok := pgScalarText("q."+pgx.Identifier{c.name}.Sanitize(), c.oid)
		if !ok {
			return nil, fmt.Errorf("%w: %s: column %q has a type whose values cannot be summed", ErrNoSums, s.name, c.name)
		}
		if i > 0 {
			text.WriteString(" || ")
		}
		if !p.layout.Single {
			text.WriteString(pgLiteral("c"+strconv.Itoa(len(c.name))+":"+c.name) + " || ")
		}
		text.WriteString(expr)
		p.layout.Columns = append(p.layout.Columns, c.name)
	}
	if p.layout.Single && vals[0].oid == pgtype.NumericOID {
		p.layout.Numeric = true
		p.numeric = "q." + pgx.Identifier{vals[0].name}.Sanitize()
	}
	p.text = text.String()
	if p.text == "" {
		p.text = "''"
	}
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

// keyHashSQL is the SQL of a row's key hash under the seed $1.
func (p *pgSumPlan) keyHashSQL() string {
	return "hashtextextended(" + p.key + ", $1::bigint)"
}

// bucketSQL is the SQL of a row's bucket under the seed $1 and mask $2.
func (p *pgSumPlan) bucketSQL() string {
	return "(" + p.keyHashSQL() + " & $2::bigint)"
}

func checkBits(bits int) error {
	if bits < 0 || bits > MaxSumBits {
		return fmt.Errorf("%w: %d bits of buckets: want 0 to %d", ErrStore, bits, MaxSumBits)
	}
	return nil
}

// rowHashSQL is the SQL of a row's hash under the seed $1.
func (p *pgSumPlan) rowHashSQL() string {
	kh := p.keyHashSQL()
	if p.layout.Numeric {
		v := p.numeric
		return "COALESCE(hash_numeric_extended(" + v + ", " + kh + " # (" + v + " < 0)::int::bigint), hashtextextended('Z', " + kh + "))"
	}
	return "hashtextextended((" + p.text + `) COLLATE "C", ` + kh + ")"
}

// Sums implements Summer: one scan, a hash aggregate by bucket.
func (s *pgStore) Sums(ctx context.Context, bits int, seed uint64) ([]BucketSum, error) {
	if err := checkBits(bits); err != nil {
		return nil, err
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
	// The key hash is written twice (the planner computes it twice): as
	// a subquery's column, it would not be pulled up into the scan unless
	// written out, and a subquery fenced with OFFSET 0 runs in one process
	// (no parallel workers).
	sql := "SELECT b, count(*), sum(h)::text FROM (SELECT " + p.bucketSQL() + " AS b, " + p.rowHashSQL() + " AS h FROM (" + s.query + ") q) s GROUP BY b"
	rows, err := conn.Query(ctx, sql, int64(seed), int64(1)<<bits-1)
	if err != nil {
		return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
	}
	defer rows.Close()
	out := make([]BucketSum, 1<<bits)
	var b, n int64
	var sum string
	for rows.Next() {
		if err := rows.Scan(&b, &n, &sum); err != nil {
			return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
		}
		v, ok := new(big.Int).SetString(sum, 10)
		if !ok || b < 0 || b >= int64(len(out)) || v.BitLen() > 127 {
			return nil, storeError(ctx, s.name, fmt.Errorf("sums: bucket %d: sum %q", b, sum))
		}
		if v.Sign() < 0 { // two's complement
			v.Add(v, new(big.Int).Lsh(big.NewInt(1), 128))
		}
		lo := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0)))
		out[b] = BucketSum{Rows: n, Hi: new(big.Int).Rsh(v, 64).Uint64(), Lo: lo.Uint64()}
	}
	if err := rows.Err(); err != nil {
		return nil, storeError(ctx, s.name, fmt.Errorf("sums: %w", err))
	}
	return out, nil
}

// ScanBuckets implements Summer: one scan of every row, which computes
// each row's key hash.
func (s *pgStore) ScanBuckets(ctx context.Context, bits int, seed uint64, buckets []uint64, fn func(Row) error) error {
	if err := checkBits(bits); err != nil {
		return err
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
	bs := make([]int64, len(buckets))
	for i, b := range buckets {
		bs[i] = int64(b)
	}
	return s.scanConn(ctx, conn, "SELECT q.* FROM ("+s.query+") q WHERE "+p.bucketSQL()+" = ANY($3::bigint[])", []any{int64(seed), int64(1)<<bits - 1, bs}, fn)
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

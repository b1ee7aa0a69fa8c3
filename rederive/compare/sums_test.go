package compare_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive/compare"
	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// copyText escapes a value for COPY's text format (nil is NULL).
func copyText(v any) string {
	if v == nil {
		return `\N`
	}
	r := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)
	return r.Replace(fmt.Sprint(v))
}

// sumsTable creates a table of columns and loads rows (each a list of
// column values, nil for NULL), and returns a store config reading it.
func sumsTable(t *testing.T, columns string, rows [][]any) store.Config {
	t.Helper()
	conn := storetest.PostgresConn(t)
	table := storetest.PostgresTable(t, conn, columns)
	lines := make([]string, len(rows))
	for i, r := range rows {
		cells := make([]string, len(r))
		for j, v := range r {
			cells[j] = copyText(v)
		}
		lines[i] = strings.Join(cells, "\t")
	}
	storetest.Copy(t, conn, table, lines)
	return store.Config{Postgres: &store.PostgresConfig{DSN: storetest.PostgresDSN(), Table: strings.Trim(table, `"`)}}
}

// bothWays compares s with expected by rows and by sums and fails t
// unless both report the same drift (kind, key, field paths) and the same
// counts. It returns the sums comparison's stats.
func bothWays(t *testing.T, cfg store.Config, expected map[string]any, c compare.Config) (rows, sums compare.Stats) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(m compare.Method) (compare.Stats, []string) {
		c := c
		c.Method = m
		var got []string
		st, err := compare.Compare(ctx, s, expected, c, func(d compare.Drift) error {
			var fields []string
			for _, f := range d.Fields {
				fields = append(fields, f.Field+"/"+f.Absent)
			}
			got = append(got, fmt.Sprintf("%s %q %v", d.Kind, d.Key, fields))
			return nil
		})
		if err != nil {
			t.Fatalf("method %s: %v", m, err)
		}
		slices.Sort(got)
		return st, got
	}
	rst, rdrift := run(compare.MethodRows)
	sst, sdrift := run(compare.MethodSums)
	if !slices.Equal(rdrift, sdrift) {
		t.Errorf("drift differs:\nrows: %q\nsums: %q", rdrift, sdrift)
	}
	if rst.Keys != sst.Keys || rst.Matched != sst.Matched || rst.Missing != sst.Missing || rst.Mismatched != sst.Mismatched || rst.Extra != sst.Extra {
		t.Errorf("stats differ:\nrows: %+v\nsums: %+v", rst, sst)
	}
	if sst.Matched+sst.Missing+sst.Mismatched != sst.Keys {
		t.Errorf("sums stats do not add up: %+v", sst)
	}
	return rst, sst
}

// edgeKeys are keys whose byte order is easy to get wrong: prefixes of one
// another, the empty key, upper before lower case, multi-byte UTF-8,
// digits that sort as text.
var edgeKeys = []string{"", " ", "A", "Z", "a", "a ", "ab", "a\u0001", "é", "ü", "\u4e2d", "\U0001F600", "10", "9", "09", "key-", "key-~"}

// TestSumsClean loads tables of every summable column type, the store
// holding exactly the expected values (written in other forms where they
// are equal: 12.50 for 12.5, 1e3 for 1000, 0.5 as a float): the sums
// agree and not one row is read.
func TestSumsClean(t *testing.T) {
	defer compare.SetSumTuning(16, 1)()
	const n = 300
	numeric := func(i int) (store string, exp any) {
		switch i % 6 {
		case 0:
			return fmt.Sprintf("%d.%02d", i-150, i%100), json.Number(strings.TrimRight(strings.TrimRight(fmt.Sprintf("%d.%02d", i-150, i%100), "0"), "."))
		case 1:
			return "1000.00", json.Number("1e3")
		case 2:
			return "0.50", 0.5
		case 3:
			return "-0.00", int64(0)
		case 4:
			return "123456789012345678901234567890.123", json.Number("123456789012345678901234567890.1230")
		}
		return strconv.Itoa(i), int64(i)
	}
	key := func(i int) string {
		if i < len(edgeKeys) {
			return edgeKeys[i]
		}
		return fmt.Sprintf("k%05d", i*7919%100000)
	}
	t.Run("numeric", func(t *testing.T) {
		var rows [][]any
		exp := map[string]any{}
		for i := range n {
			s, e := numeric(i)
			rows = append(rows, []any{key(i), s})
			exp[key(i)] = e
		}
		_, st := bothWays(t, sumsTable(t, "key text, value numeric", rows), exp, compare.Config{})
		if st.Rows != 0 || st.Summed != n {
			t.Errorf("clean numeric table: %+v, want no row read and every key summed", st)
		}
	})
	t.Run("columns", func(t *testing.T) {
		var rows [][]any
		exp := map[string]any{}
		for i := range n {
			s, e := numeric(i)
			var name any = fmt.Sprintf("user\t%d 'é'", i)
			if i%5 == 0 {
				name = nil
			}
			if i%7 == 0 {
				name = "12.50" // text that looks like a number
			}
			var flag any = i%2 == 0
			if i%9 == 0 {
				flag = nil
			}
			id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
			rows = append(rows, []any{int64(i*31 - 4000), s, name, flag, int64(i) << 40, id, fmt.Sprintf("2024-05-%02d", i%28+1)})
			exp[strconv.Itoa(i*31-4000)] = map[string]any{"amount": e, "name": name, "flag": flag, "big": int64(i) << 40, "id": id, "day": fmt.Sprintf("2024-05-%02d", i%28+1)}
		}
		_, st := bothWays(t, sumsTable(t, "k bigint, amount numeric(40,3), name text, flag boolean, big bigint, id uuid, day date", rows), exp, compare.Config{})
		if st.Rows != 0 || st.Summed != n {
			t.Errorf("clean table of several columns: %+v, want no row read and every key summed", st)
		}
	})
}

// TestSumsDifferential compares random tables with random drift by rows
// and by sums: the same drift set every time. Drift: wrong values, values
// off by one cent, missing rows, extra rows (below the first key, above
// the last, between), NULLs, strings that look like numbers, empty
// strings, signs flipped, deleted keys the store holds or not, keys with
// bytes past 0x7f, prefixes of one another, the empty key.
func TestSumsDifferential(t *testing.T) {
	for round := range 4 {
		seed := uint64(round) + 1
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			defer compare.SetSumTuning(1+rng.IntN(40), 1)()
			if round >= 2 {
				// The keys of differing buckets found from their bytes,
				// not from the first pass's record.
				defer compare.RecordNoKeys()()
			}
			n := rng.IntN(700)
			single := round%2 == 0
			var keys []string
			seen := map[string]bool{}
			for len(keys) < n {
				var k string
				switch rng.IntN(4) {
				case 0:
					k = edgeKeys[rng.IntN(len(edgeKeys))] + strconv.Itoa(rng.IntN(50))
				default:
					k = fmt.Sprintf("key-%06d", rng.IntN(1_000_000))
				}
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			value := func() (st any, exp any) {
				cents := rng.Int64N(2_000_000) - 1_000_000
				txt := fmt.Sprintf("%s%d.%02d", map[bool]string{true: "-"}[cents < 0], max(cents, -cents)/100, max(cents, -cents)%100)
				switch rng.IntN(4) {
				case 0:
					return txt, json.Number(txt)
				case 1:
					return txt, json.Number(strings.TrimRight(strings.TrimRight(txt, "0"), "."))
				case 2:
					return strconv.FormatInt(cents*100, 10), json.Number(strconv.FormatInt(cents, 10) + "e2")
				}
				return fmt.Sprint(cents), cents
			}
			exp := map[string]any{}
			var rows [][]any
			drift := rng.IntN(5) * rng.IntN(20) // often few, sometimes none
			for i, k := range keys {
				s, e := value()
				var name any = fmt.Sprintf("n%d", rng.IntN(5))
				switch rng.IntN(10) {
				case 0:
					name = "" // an empty string, not NULL
				case 1:
					name = nil
				case 2:
					name = "0.10" // text that looks like a number
				}
				row := []any{k, s}
				if !single {
					row = append(row, name)
				}
				var ev any = e
				if !single {
					ev = map[string]any{"v": e, "name": name}
				}
				exp[k] = ev
				if i >= drift {
					rows = append(rows, row)
					continue
				}
				switch rng.IntN(9) {
				case 8: // the sign flipped (numeric hashes ignore it)
					if t := fmt.Sprint(s); strings.HasPrefix(t, "-") {
						row[1] = t[1:]
					} else if strings.Trim(t, "0.") != "" {
						row[1] = "-" + t
					} else {
						row[1] = "1"
					}
				case 0: // missing
					continue
				case 1: // a wrong value
					row[1] = "4242.42"
				case 2: // NULL
					row[1] = nil
				case 3: // a cent off
					c, _ := strconv.ParseFloat(fmt.Sprint(s), 64)
					row[1] = strconv.FormatFloat(c+0.01, 'f', 2, 64)
				case 4: // the expected value is text that looks like the number
					if single {
						exp[k] = fmt.Sprint(s)
					} else {
						ev.(map[string]any)["v"] = fmt.Sprint(s)
					}
				case 5: // deleted, yet stored
					exp[k] = nil
				case 6: // deleted, and absent
					exp[k] = nil
					continue
				case 7: // wrong name
					if !single {
						row[2] = "other"
					} else {
						row[1] = "0"
					}
				}
				rows = append(rows, row)
			}
			for range rng.IntN(3) * rng.IntN(8) { // extra rows
				var k string
				switch rng.IntN(3) {
				case 0:
					k = "" + strconv.Itoa(rng.IntN(10)) // below most keys
				case 1:
					k = "\U0010FFFF" + strconv.Itoa(rng.IntN(10)) // above every key
				default:
					k = fmt.Sprintf("key-%06d-x", rng.IntN(1_000_000))
				}
				if seen[k] {
					continue
				}
				seen[k] = true
				row := []any{k, "1.00"}
				if !single {
					row = append(row, "x")
				}
				rows = append(rows, row)
			}
			cols := "key text, v numeric(12,2)"
			if !single {
				cols += ", name text"
			}
			cfg := sumsTable(t, cols, rows)
			for _, c := range []compare.Config{{}, {Deleted: compare.DeletedNull, IgnoreExtra: true}} {
				rst, sst := bothWays(t, cfg, exp, c)
				t.Logf("n %d, drift %d: rows read %d by rows, %d by sums (%d sum queries)", n, drift, rst.Rows, sst.Rows, sst.SumQueries)
			}
		})
	}
}

// TestSumsSwap: a bucket that lacks an expected key and holds a key not
// expected as many rows as it should: its sum differs, the expected keys
// read show one missing, and the bucket's rows are read for the extra
// key. The same with only a wrong value: no bucket is read whole; and
// with a sign flipped.
func TestSumsSwap(t *testing.T) {
	defer compare.SetSumTuning(1<<20, 1)() // one bucket
	var rows [][]any
	exp := map[string]any{}
	for i := range 200 {
		k := fmt.Sprintf("ké%03d", i)
		exp[k] = json.Number(strconv.Itoa(i) + ".5")
		rows = append(rows, []any{k, strconv.Itoa(i) + ".50"})
	}
	swapped := append([][]any{}, rows[1:]...)
	swapped = append(swapped, []any{"ké-extra", "0.50"})
	_, st := bothWays(t, sumsTable(t, "key text, v numeric", swapped), exp, compare.Config{})
	if st.Missing != 1 || st.Extra != 1 {
		t.Errorf("swapped: %+v, want one missing and one extra", st)
	}
	wrong := append([][]any{}, rows...)
	wrong[7] = []any{rows[7][0], "7.51"}
	_, st = bothWays(t, sumsTable(t, "key text, v numeric", wrong), exp, compare.Config{})
	if st.Mismatched != 1 || st.Rows != 200 {
		t.Errorf("one wrong value: %+v, want one mismatch and each key read once", st)
	}
	// PostgreSQL's hash of a numeric ignores its sign: the row hash
	// must not.
	flipped := append([][]any{}, rows...)
	flipped[3] = []any{rows[3][0], "-3.5"}
	_, st = bothWays(t, sumsTable(t, "key text, v numeric", flipped), exp, compare.Config{})
	if st.Mismatched != 1 {
		t.Errorf("a sign flipped: %+v, want one mismatch", st)
	}
}

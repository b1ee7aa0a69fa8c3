package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/auditd/auditd/rederive/store"
	"github.com/auditd/auditd/rederive/store/storetest"
)

// TestHashTextPostgres checks HashText against PostgreSQL's
// hashtextextended for texts of every tail length (0 to 40 bytes, past
// three 12-byte blocks), multi-byte UTF-8, and seeds zero and not.
func TestHashTextPostgres(t *testing.T) {
	conn := storetest.PostgresConn(t)
	var texts []string
	for n := range 41 {
		texts = append(texts, strings.Repeat("abcdefghijklm", 4)[:n])
	}
	texts = append(texts, "é", "aé中", "\U0001F600 key-00000001 n12.5;", strings.Repeat("中", 11))
	for _, seed := range []uint64{0, 1, 0x8badf00ddeadbeef, 1 << 63} {
		for _, s := range texts {
			var got int64
			if err := conn.QueryRow(context.Background(), `SELECT hashtextextended($1::text COLLATE "C", $2)`, s, int64(seed)).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := store.HashText([]byte(s), seed); uint64(got) != want {
				t.Errorf("seed %#x, %q (%d bytes): PostgreSQL %#x, HashText %#x", seed, s, len(s), uint64(got), want)
			}
		}
	}
}

// TestHashNumericPostgres checks HashNumeric against PostgreSQL's
// hash_numeric_extended: zero, digits either side of the point in every
// position of a base-10,000 digit, leading and trailing zero digits,
// numbers past 40 digits, with seeds zero and not; and that text that is
// no plain decimal is refused.
func TestHashNumericPostgres(t *testing.T) {
	conn := storetest.PostgresConn(t)
	nums := []string{"0", "0.0", "1", "9", "10", "9999", "10000", "10001", "123.45", "0.5", "0.0001", "0.00001",
		"100000000", "1.00000001", "12345678901234567890.123456789", strings.Repeat("9", 45), "0." + strings.Repeat("0", 30) + "7",
		"7" + strings.Repeat("0", 30), "42.42", "100.01", "3.1415926535"}
	for _, seed := range []uint64{0, 1, 0x8badf00ddeadbeef, 1 << 63} {
		for _, s := range nums {
			var got int64
			if err := conn.QueryRow(context.Background(), `SELECT hash_numeric_extended($1::numeric, $2)`, s, int64(seed)).Scan(&got); err != nil {
				t.Fatal(err)
			}
			want, ok := store.HashNumeric([]byte(s), seed)
			if !ok || uint64(got) != want {
				t.Errorf("seed %#x, %s: PostgreSQL %#x, HashNumeric %#x, %v", seed, s, uint64(got), want, ok)
			}
		}
	}
	for _, s := range []string{"", ".5", "1.2.3", "-1", "1e3", "12a"} {
		if _, ok := store.HashNumeric([]byte(s), 1); ok {
			t.Errorf("HashNumeric(%q) accepted", s)
		}
	}
}

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

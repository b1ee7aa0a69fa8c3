package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
)

// TestLedgeredAt: each entry's ledgered time is the time of the group
// commit that appended it (by the store's clock, not the entry's own time),
// across group commits past a tile and a read batch, and kept across a
// restart; an index at or past the size has none.
func TestLedgeredAt(t *testing.T) {
	dir := t.TempDir()
	key := ledgertest.NewKey(t, "ledgered.example")
	var now time.Time
	clock := ledger.WithClock(func() time.Time { return now })
	s := ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(key), ledgertest.WithLedger(clock))
	l, err := s.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	groups := []int{1, 300, 1000, 5}
	for g, n := range groups {
		now = t0.Add(time.Duration(g) * time.Hour)
		es := make([]ledger.Entry, n)
		for i := range es {
			es[i] = ledger.Entry{ID: fmt.Sprintf("g%d-%d", g, i), Time: t0.AddDate(-3, 0, 0), Payload: []byte{byte(g), byte(i), byte(i >> 8)}}
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
	check := func(l *ledger.Log) {
		t.Helper()
		index := uint64(0)
		for g, n := range groups {
			for _, i := range []uint64{index, index + uint64(n) - 1} {
				got, ok, err := l.LedgeredAt(i)
				if want := t0.Add(time.Duration(g) * time.Hour); err != nil || !ok || !got.Equal(want) {
					t.Errorf("LedgeredAt(%d) = %v %v %v, want %v (group %d)", i, got, ok, err, want, g)
				}
			}
			index += uint64(n)
		}
		if _, ok, err := l.LedgeredAt(index); ok || err != nil {
			t.Errorf("LedgeredAt(size) = %v %v, want none", ok, err)
		}
	}
	check(l)
	s.Close()
	s = ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(key))
	l, err = s.Log("payments")
	if err != nil {
		t.Fatal(err)
	}
	check(l)
}

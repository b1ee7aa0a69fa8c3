package ledger

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/auditd/auditd/merkle"
)

// TestScanEntries checks that the bulk read gives each entry the leaf hash
// Entries recomputes from it (across full and partial tiles, in separate
// commits), the same fields and payload, and that ranges are checked.
func TestScanEntries(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l, err := s.CreateLog("scan")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for batch := 0; batch < 3; batch++ {
		var es []Entry
		for i := 0; i < 300; i++ {
			es = append(es, Entry{ID: fmt.Sprintf("e-%d-%d", batch, i), HasKey: true, Key: []byte{byte(i)},
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), PayloadJSON: true,
				Headers: []merkle.Header{{Key: "h", Value: []byte{byte(batch)}}}})
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	size := l.Size()
	var want []*Record
	if err := l.Entries(ctx, 0, size, func(r *Record) error { want = append(want, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]uint64{{0, size}, {255, 513}, {700, size}, {size, size}} {
		var got []*Record
		if err := l.ScanEntries(ctx, r[0], r[1], func(rec *Record) error { got = append(got, rec); return nil }); err != nil {
			t.Fatalf("ScanEntries(%d, %d): %v", r[0], r[1], err)
		}
		if uint64(len(got)) != r[1]-r[0] {
			t.Fatalf("ScanEntries(%d, %d) gave %d records", r[0], r[1], len(got))
		}
		for i, g := range got {
			w := want[r[0]+uint64(i)]
			if g.Index != w.Index || g.LeafHash != w.LeafHash || g.Leaf.ID != w.Leaf.ID || string(g.Payload) != string(w.Payload) ||
				len(g.Leaf.Headers) != 1 || g.Leaf.Headers[0].Value[0] != w.Leaf.Headers[0].Value[0] {
				t.Fatalf("entry %d: ScanEntries gave %+v, Entries %+v", w.Index, g, w)
			}
		}
	}
	if err := l.ScanEntries(ctx, 0, size+1, func(*Record) error { return nil }); !errors.Is(err, ErrRange) {
		t.Errorf("ScanEntries beyond the size: %v, want ErrRange", err)
	}
}

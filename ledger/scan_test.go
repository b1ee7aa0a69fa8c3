package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestScanRecordsOwnTheirBytes checks what the scans' record slab must
// keep: records, payloads and keys come from shared blocks, yet each kept
// record still holds its own entry after the scan has gone on past the
// blocks' ends (256 records; 64 KiB of payloads and keys, here 1,200-byte
// payloads and some of 9,000 bytes, past the 8 KiB a block hands out), and
// an append to one payload or key leaves the next one's bytes alone.
func TestScanRecordsOwnTheirBytes(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "slab")
	ctx := context.Background()
	const n = 700
	payload := func(i int) []byte {
		// Every 50th payload is past the 8 KiB a block hands out, so it
		// gets its own allocation between ones from the blocks.
		pad := 1200
		if i%50 == 7 {
			pad = 9000
		}
		return fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, strings.Repeat(string(rune('a'+i%26)), pad))
	}
	var es []Entry
	for i := range n {
		es = append(es, Entry{ID: fmt.Sprint("s-", i), HasKey: true, Key: fmt.Appendf(nil, "key-%d", i), Payload: payload(i), PayloadJSON: true})
	}
	if _, err := l.Append(ctx, es); err != nil {
		t.Fatal(err)
	}
	scans := map[string]func(context.Context, uint64, uint64, func(*Record) error) error{"Entries": l.Entries, "ScanEntries": l.ScanEntries}
	for name, scan := range scans {
		var got []*Record
		if err := scan(ctx, 0, n, func(r *Record) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.Index != uint64(i) || string(r.Payload) != string(payload(i)) || string(r.Leaf.Key) != fmt.Sprint("key-", i) || r.Leaf.ID != fmt.Sprint("s-", i) {
				t.Fatalf("%s: record %d after the scan: index %d, key %q, id %q, payload %.20q", name, i, r.Index, r.Leaf.Key, r.Leaf.ID, r.Payload)
			}
			if i > 0 && r == got[i-1] {
				t.Fatalf("%s: records %d and %d are one record", name, i-1, i)
			}
		}
		for i := 0; i+1 < n; i++ {
			_ = append(got[i].Payload, "XXXXXXXX"...)
			_ = append(got[i].Leaf.Key, "XXXXXXXX"...)
			if string(got[i+1].Payload) != string(payload(i+1)) || string(got[i+1].Leaf.Key) != fmt.Sprint("key-", i+1) {
				t.Fatalf("%s: an append to record %d's payload or key changed record %d's", name, i, i+1)
			}
		}
	}
}

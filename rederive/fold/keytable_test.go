package fold

import (
	"fmt"
	"strings"
	"testing"
)

// TestKeyTable checks the key table against a map over keys of every
// length around keyInline (the empty key included), past several growths
// of the table and past the slot chunks.
func TestKeyTable(t *testing.T) {
	tab := newKeyTable()
	want := map[string]int64{}
	var keys []string
	for i := range 5000 {
		k := fmt.Sprint(i)
		k += strings.Repeat("x", i%(keyInline+4)) // 0 ... keyInline+3 bytes more
		keys = append(keys, k, k+"\x00", "")
	}
	for n, k := range keys {
		sl := tab.find(k)
		if _, ok := want[k]; ok != (sl != nil) {
			t.Fatalf("key %q: found %v, want %v", k, sl != nil, ok)
		}
		if sl == nil {
			buf := []byte(k)
			sl = tab.add(string(buf))
			for i := range buf {
				buf[i] = '?' // the table must not keep the caller's memory
			}
		}
		sl.index++
		want[k]++
		if n%997 == 0 {
			for k, c := range want {
				if sl := tab.find(k); sl == nil || sl.index != uint64(c) {
					t.Fatalf("key %q: slot %v, want count %d", k, sl, c)
				}
			}
		}
	}
	if tab.len() != len(want) {
		t.Fatalf("%d keys, want %d", tab.len(), len(want))
	}
	seen := map[string]bool{}
	tab.each(func(k string, sl *slot) {
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
		if sl.index != uint64(want[k]) {
			t.Fatalf("key %q: count %d, want %d", k, sl.index, want[k])
		}
	})
	if len(seen) != len(want) {
		t.Fatalf("each visited %d keys, want %d", len(seen), len(want))
	}
	if tab.find("absent") != nil || tab.find(strings.Repeat("y", 40)) != nil {
		t.Fatal("found an absent key")
	}
}

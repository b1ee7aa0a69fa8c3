package fold

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

func mustBucket(tb testing.TB, s *ledger.Store, name string) *ledger.Bucket {
	tb.Helper()
	b, err := s.Bucket(name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// bucketKeys counts the keys of b with the given prefix.
func bucketKeys(tb testing.TB, b *ledger.Bucket, prefix []byte) int {
	tb.Helper()
	n := 0
	if err := b.Scan(prefix, func(k, v []byte) error { n++; return nil }); err != nil {
		tb.Fatal(err)
	}
	return n
}

func TestResultSaveLoad(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	b := mustBucket(t, s, "rederive")
	var logs []*ledger.Log
	for i, name := range []string{"m.1", "m.0"} {
		l := mustCreate(t, s, name)
		g := newFoldGen(uint64(60+i), 800)
		g.fail = 0.01
		g.prefix = name + "-" // the derivation is ordered: no key in two logs
		appendEvents(t, l, g, 4000)
		logs = append(logs, l)
	}
	d := &GoBalances{ordered: true}
	o := Options{ErrorBudget: -1, Fingerprint: "sha256:abc"}

	if _, err := LoadResult(b, d); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("LoadResult of nothing: %v, want ErrNotFound", err)
	}
	base := mustFold(t, d, nil, fullSpans(t, logs...), o)
	if base.ErrorCount == 0 {
		t.Fatal("test data without errors")
	}
	if err := SaveResult(b, d, base); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadResult(b, d)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, d, "loaded vs saved", base, loaded)

	// Another derivation in the same bucket is independent.
	d2 := &GoBalances{name: "balances2"}
	if _, err := LoadResult(b, d2); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("LoadResult of another derivation: %v, want ErrNotFound", err)
	}
	other := mustFold(t, d2, nil, fullSpans(t, logs[0]), Options{ErrorBudget: -1})
	if err := SaveResult(b, d2, other); err != nil {
		t.Fatal(err)
	}

	// Incremental from the loaded result equals a full fold.
	for i, l := range logs {
		g := newFoldGen(uint64(70+i), 900)
		g.prefix = l.Name() + "-"
		appendEvents(t, l, g, 1500)
	}
	inc := mustFold(t, d, loaded, nextSpans(t, loaded, logs...), o)
	full := mustFold(t, d, nil, fullSpans(t, logs...), o)
	sameResult(t, d, "incremental from loaded vs full", inc, full)

	// Saving again replaces the result and leaves one generation.
	if err := SaveResult(b, d, inc); err != nil {
		t.Fatal(err)
	}
	again, err := LoadResult(b, d)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, d, "second save", inc, again)
	if n := bucketKeys(t, b, stateKeysPrefix(d.Name())); n != len(inc.States) {
		t.Errorf("%d key records stored for %d keys", n, len(inc.States))
	}
	if got, err := LoadResult(b, d2); err != nil {
		t.Fatal(err)
	} else {
		sameResult(t, d2, "other derivation", other, got)
	}

	// Deleting one derivation's result leaves the other.
	if err := DeleteResult(b, d.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResult(b, d); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("LoadResult after DeleteResult: %v", err)
	}
	if n := bucketKeys(t, b, []byte(d.Name()+"\x00")); n != 0 {
		t.Errorf("%d records left after DeleteResult", n)
	}
	if _, err := LoadResult(b, d2); err != nil {
		t.Errorf("the other derivation after DeleteResult: %v", err)
	}
}

// TestResultCrashedSave checks that a save that stopped before switching
// the meta leaves the old result, and that the next save cleans up.
func TestResultCrashedSave(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	b := mustBucket(t, s, "rederive")
	l := mustCreate(t, s, "log")
	appendEvents(t, l, newFoldGen(1, 100), 1000)
	d := &GoBalances{}
	r := mustFold(t, d, nil, fullSpans(t, l), Options{})
	if err := SaveResult(b, d, r); err != nil {
		t.Fatal(err)
	}
	// What a crashed save leaves: records of the next generation, some
	// for keys the result does not hold, and no meta switch.
	for i := range 50 {
		k := append(stateGenPrefix(d.Name(), 2), fmt.Sprintf("a%d", i*7)...)
		if err := b.Set(k, []byte{1, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LoadResult(b, d)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, d, "after a crashed save", r, got)

	appendEvents(t, l, newFoldGen(2, 300), 500)
	r2 := mustFold(t, d, got, nextSpans(t, got, l), Options{})
	if err := SaveResult(b, d, r2); err != nil {
		t.Fatal(err)
	}
	got2, err := LoadResult(b, d)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, d, "save after a crashed save", r2, got2)
	if n := bucketKeys(t, b, stateKeysPrefix(d.Name())); n != len(r2.States) {
		t.Errorf("%d key records stored for %d keys", n, len(r2.States))
	}
}

func TestResultCorrupt(t *testing.T) {
	s := OpenFoldStore(t, t.TempDir())
	b := mustBucket(t, s, "rederive")
	d := &GoBalances{}
	r := &Result{
		Derivation: d.Name(),
		Pins:       []Pin{{Log: "l", Size: 10}},
		States:     map[string]State{"k": GoBalance{Sum: 5, Count: 1}, "": GoBalance{Sum: -1, Count: 2}},
		Newest: map[string]EventRef{
			"k": {Log: "l", Index: 3, ID: "e3", Time: time.Unix(0, 12345).UTC(), LeafHash: merkle.Hash{1, 2, 3}},
			"":  {Log: "l", Index: 9, ID: "", Time: time.Unix(-5, 0).UTC()},
		},
		Events: 10, Applied: 3,
	}
	if err := SaveResult(b, d, r); err != nil {
		t.Fatal(err)
	}
	got, err := LoadResult(b, d)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, d, "round trip", r, got)

	// A newest entry of an unpinned log cannot be saved.
	bad := *r
	bad.Newest = map[string]EventRef{"k": {Log: "other"}}
	if err := SaveResult(b, d, &bad); err == nil || !strings.Contains(err.Error(), "does not pin") {
		t.Errorf("SaveResult with an unpinned newest: %v", err)
	}
	bad = *r
	bad.Derivation = "x"
	if err := SaveResult(b, d, &bad); err == nil {
		t.Error("SaveResult of another derivation's result succeeded")
	}

	// Corrupt records fail the load.
	k := append(stateGenPrefix(d.Name(), 1), 'k')
	good, err := b.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range [][]byte{nil, {0}, {9, 1}, append(bytes.Clone(good[:len(good)-36]), 0), {3, 2, 2, 0, 2}} {
		if err := b.Set(k, v); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadResult(b, d); err == nil {
			t.Errorf("corrupt record %d (%x) loaded", i, v)
		}
	}
	if err := b.Set(k, good); err != nil {
		t.Fatal(err)
	}
	// A missing record fails the load.
	if err := b.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResult(b, d); err == nil || !strings.Contains(err.Error(), "meta says 2") {
		t.Errorf("load with a missing record: %v", err)
	}
	// So does a corrupt meta; a save over it starts afresh.
	if err := b.Set(stateMetaKey(d.Name()), []byte(`{"version": 99}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResult(b, d); err == nil {
		t.Error("corrupt meta loaded")
	}
	if err := SaveResult(b, d, r); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadResult(b, d); err != nil {
		t.Fatal(err)
	} else {
		sameResult(t, d, "save over a corrupt meta", r, got)
	}
	if n := bucketKeys(t, b, stateKeysPrefix(d.Name())); n != 2 {
		t.Errorf("%d key records after a save over a corrupt meta, want 2", n)
	}
}

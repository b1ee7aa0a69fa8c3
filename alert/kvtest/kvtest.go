// Package kvtest is the conformance suite for [alert.KV]: every
// implementation (the ledger's Pebble bucket, the in-memory fake of the
// alert tests) runs it, so that a fake cannot drift from the real thing.
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/ledger"
)

// Run checks the contract written on [alert.KV] against the stores that
// newKV returns: each subtest gets a fresh, empty one.
func Run(t *testing.T, newKV func(t *testing.T) alert.KV) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, kv alert.KV)
	}{
		{"GetMissing", testGetMissing},
		{"SetGet", testSetGet},
		{"Overwrite", testOverwrite},
		{"ValuesAreCopies", testValuesAreCopies},
		{"Delete", testDelete},
		{"ScanPrefixInOrder", testScanPrefixInOrder},
		{"ScanPrefixBoundary", testScanPrefixBoundary},
		{"ScanStopsOnError", testScanStopsOnError},
		{"ScanAfterDelete", testScanAfterDelete},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newKV(t)) })
	}
}

func mustSet(t *testing.T, kv alert.KV, k, v string) {
	t.Helper()
	if err := kv.Set([]byte(k), []byte(v)); err != nil {
		t.Fatalf("Set(%q): %v", k, err)
	}
}

func wantValue(t *testing.T, kv alert.KV, k, want string) {
	t.Helper()
	got, err := kv.Get([]byte(k))
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	if string(got) != want {
		t.Fatalf("Get(%q) = %q, want %q", k, got, want)
	}
}

func wantMissing(t *testing.T, kv alert.KV, k string) {
	t.Helper()
	if v, err := kv.Get([]byte(k)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want an error wrapping ledger.ErrNotFound", k, v, err)
	}
}

// scan returns "k=v" for every pair Scan(prefix) yields, in the order given.
func scan(t *testing.T, kv alert.KV, prefix string) []string {
	t.Helper()
	var out []string
	err := kv.Scan([]byte(prefix), func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatalf("Scan(%q): %v", prefix, err)
	}
	return out
}

func wantScan(t *testing.T, kv alert.KV, prefix string, want ...string) {
	t.Helper()
	got := scan(t, kv, prefix)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Scan(%q) = %q, want %q", prefix, got, want)
	}
}

func testGetMissing(t *testing.T, kv alert.KV) {
	wantMissing(t, kv, "absent")
	mustSet(t, kv, "present", "1")
	wantMissing(t, kv, "pres")
	wantMissing(t, kv, "present/")
}

func testSetGet(t *testing.T, kv alert.KV) {
	mustSet(t, kv, "a", "1")
	mustSet(t, kv, "b", "")
	bin := string([]byte{0, 0xff, '\n', 0x80})
	mustSet(t, kv, bin, bin)
	wantValue(t, kv, "a", "1")
	wantValue(t, kv, "b", "")
	wantValue(t, kv, bin, bin)
}

func testOverwrite(t *testing.T, kv alert.KV) {
	mustSet(t, kv, "k", "first")
	mustSet(t, kv, "k", "second, longer")
	mustSet(t, kv, "k", "3")
	wantValue(t, kv, "k", "3")
	wantScan(t, kv, "", "k=3")
}

// testValuesAreCopies checks that the store keeps its own copy of what it is
// given and hands out values the caller may change.
func testValuesAreCopies(t *testing.T, kv alert.KV) {
	k, v := []byte("key"), []byte("value")
	if err := kv.Set(k, v); err != nil {
		t.Fatal(err)
	}
	copy(k, "XXX")
	copy(v, "XXXXX")
	wantValue(t, kv, "key", "value")
	got, err := kv.Get([]byte("key"))
	if err != nil {
		t.Fatal(err)
	}
	copy(got, "YYYYY")
	wantValue(t, kv, "key", "value")
}

func testDelete(t *testing.T, kv alert.KV) {
	if err := kv.Delete([]byte("never-set")); err != nil {
		t.Fatalf("Delete of a missing key: %v, want nil", err)
	}
	mustSet(t, kv, "a", "1")
	mustSet(t, kv, "ab", "2")
	if err := kv.Delete([]byte("a")); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, kv, "a")
	wantValue(t, kv, "ab", "2")
	if err := kv.Delete([]byte("a")); err != nil {
		t.Fatalf("second Delete: %v, want nil", err)
	}
	mustSet(t, kv, "a", "again")
	wantValue(t, kv, "a", "again")
}

func testScanPrefixInOrder(t *testing.T, kv alert.KV) {
	for _, k := range []string{"alert/c", "seq", "alert/a", "alert/b/2", "alerts", "alert/b", "aler", "b"} {
		mustSet(t, kv, k, "v"+k)
	}
	wantScan(t, kv, "alert/", "alert/a=valert/a", "alert/b=valert/b", "alert/b/2=valert/b/2", "alert/c=valert/c")
	wantScan(t, kv, "alert", "alert/a=valert/a", "alert/b=valert/b", "alert/b/2=valert/b/2", "alert/c=valert/c", "alerts=valerts")
	wantScan(t, kv, "nothing/")
	wantScan(t, kv, "", "aler=valer", "alert/a=valert/a", "alert/b=valert/b", "alert/b/2=valert/b/2",
		"alert/c=valert/c", "alerts=valerts", "b=vb", "seq=vseq")
}

// testScanPrefixBoundary checks byte order, not string or rune order, and
// prefixes that end in 0xff (whose upper bound is not prefix+1).
func testScanPrefixBoundary(t *testing.T, kv alert.KV) {
	ff := string([]byte{'p', 0xff})
	for _, k := range []string{"p", "p\x00", "p\x7f", ff, ff + "\xff", ff + "a", "q", "p\xfe"} {
		mustSet(t, kv, k, "")
	}
	var got [][]byte
	err := kv.Scan([]byte(ff), func(k, v []byte) error {
		got = append(got, bytes.Clone(k))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte(ff), []byte(ff + "a"), []byte(ff + "\xff")}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("Scan(%q) keys = %q, want %q", ff, got, want)
	}
	wantScan(t, kv, "p", "p=", "p\x00=", "p\x7f=", "p\xfe=", ff+"=", ff+"a=", ff+"\xff=")
}

func testScanStopsOnError(t *testing.T, kv alert.KV) {
	for _, k := range []string{"x/1", "x/2", "x/3"} {
		mustSet(t, kv, k, k)
	}
	stop := errors.New("stop here")
	var seen []string
	err := kv.Scan([]byte("x/"), func(k, v []byte) error {
		seen = append(seen, string(k))
		if string(k) == "x/2" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Scan = %v, want the error fn returned", err)
	}
	if fmt.Sprint(seen) != "[x/1 x/2]" {
		t.Fatalf("Scan went on after fn failed: saw %q", seen)
	}
}

func testScanAfterDelete(t *testing.T, kv alert.KV) {
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		mustSet(t, kv, k, k)
	}
	if err := kv.Delete([]byte("a/2")); err != nil {
		t.Fatal(err)
	}
	mustSet(t, kv, "a/3", "new")
	wantScan(t, kv, "a/", "a/1=a/1", "a/3=new")
}

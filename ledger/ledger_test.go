package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// t0 is an event time with nanoseconds, so that truncation would show.
var t0 = time.Date(2024, 5, 17, 12, 30, 0, 123456789, time.UTC)

const violationsMetric = "ledger_integrity_violations_total"

// checkRecord checks that rec, at index idx of log, holds what e carried.
// An entry without a time must have been stamped within [notBefore, notAfter].
func checkRecord(t *testing.T, log string, idx uint64, rec *Record, e Entry, notBefore, notAfter time.Time) {
	t.Helper()
	wantID := e.ID
	if wantID == "" {
		wantID = DeriveID(&e)
	}
	if rec.Index != idx {
		t.Errorf("entry %d: Index = %d", idx, rec.Index)
	}
	if rec.Leaf.Log != log {
		t.Errorf("entry %d: Leaf.Log = %q, want %q", idx, rec.Leaf.Log, log)
	}
	if rec.Leaf.ID != wantID {
		t.Errorf("entry %d: Leaf.ID = %q, want %q", idx, rec.Leaf.ID, wantID)
	}
	if rec.Leaf.HasKey != e.HasKey || !bytes.Equal(rec.Leaf.Key, e.Key) {
		t.Errorf("entry %d: key = (%v, %q), want (%v, %q)", idx, rec.Leaf.HasKey, rec.Leaf.Key, e.HasKey, e.Key)
	}
	if e.Time.IsZero() {
		if !rec.Leaf.TimeAssigned {
			t.Errorf("entry %d: entry without time is not marked TimeAssigned", idx)
		}
		if got := rec.Leaf.Time; got < notBefore.UnixNano() || got > notAfter.UnixNano() {
			t.Errorf("entry %d: assigned time %v outside the Append call [%v, %v]", idx, time.Unix(0, got), notBefore, notAfter)
		}
	} else {
		if rec.Leaf.TimeAssigned {
			t.Errorf("entry %d: given time marked TimeAssigned", idx)
		}
		if rec.Leaf.Time != e.Time.UnixNano() {
			t.Errorf("entry %d: Time = %d, want %d", idx, rec.Leaf.Time, e.Time.UnixNano())
		}
	}
	if !reflect.DeepEqual(rec.Leaf.Source, e.Source) {
		t.Errorf("entry %d: Source = %+v, want %+v", idx, rec.Leaf.Source, e.Source)
	}
	if !bytes.Equal(rec.Payload, e.Payload) || rec.PayloadJSON != e.PayloadJSON || rec.PayloadPruned {
		t.Errorf("entry %d: payload = (%q, json %v, pruned %v), want (%q, json %v, pruned false)", idx, rec.Payload, rec.PayloadJSON, rec.PayloadPruned, e.Payload, e.PayloadJSON)
	}
	if rec.Leaf.PayloadSHA256 != sha256.Sum256(e.Payload) {
		t.Errorf("entry %d: Leaf.PayloadSHA256 is not the SHA-256 of the payload", idx)
	}
	if rec.LeafHash != merkle.LeafHash(rec.LeafBytes) {
		t.Errorf("entry %d: LeafHash != merkle.LeafHash(LeafBytes)", idx)
	}
	// The leaf bytes are the documented encoding of the entry header.
	want := merkle.Leaf{Log: log, ID: wantID, HasKey: e.HasKey, Key: e.Key, Time: rec.Leaf.Time,
		TimeAssigned: e.Time.IsZero(), Source: e.Source, PayloadSHA256: sha256.Sum256(e.Payload)}
	wb, err := want.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.LeafBytes, wb) {
		t.Errorf("entry %d: LeafBytes = %x, want %x", idx, rec.LeafBytes, wb)
	}
}

func TestAppendAssignsConsecutiveIndexes(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "orders")
	first := []Entry{
		{ID: "e0", HasKey: true, Key: []byte("k0"), Time: t0, Source: &merkle.Source{Topic: "orders", Partition: 3, Offset: 42}, Payload: []byte(`{"a":1}`), PayloadJSON: true},
		{ID: "e1", HasKey: true, Time: t0.Add(time.Nanosecond), Payload: []byte("raw \x00 bytes")},
		{ID: "e2"}, // no key, no time, no source, empty payload
	}
	second := []Entry{
		{ID: "e3", Time: t0.Add(-time.Hour), Source: &merkle.Source{Topic: "t", Partition: -1, Offset: 1 << 40}, Payload: []byte("x")},
		{ID: "e4", HasKey: true, Key: []byte{}, Time: t0, Payload: []byte("y")},
	}
	before := time.Now()
	r1 := mustAppend(t, l, first...)
	after := time.Now()
	r2 := mustAppend(t, l, second...)

	if r1.Size != 3 || r2.Size != 5 || l.Size() != 5 {
		t.Fatalf("sizes: first result %d, second result %d, log %d; want 3, 5, 5", r1.Size, r2.Size, l.Size())
	}
	all := append(append([]Entry{}, first...), second...)
	res := append(append([]Appended{}, r1.Entries...), r2.Entries...)
	for i, e := range all {
		a := res[i]
		if a.Index != uint64(i) || a.ID != e.ID || a.Duplicate {
			t.Errorf("result %d = {Index %d, ID %q, Duplicate %v}, want {%d, %q, false}", i, a.Index, a.ID, a.Duplicate, i, e.ID)
		}
		rec := mustEntry(t, l, uint64(i))
		checkRecord(t, "orders", uint64(i), rec, e, before, after)
		if a.LeafHash != rec.LeafHash {
			t.Errorf("result %d: LeafHash %s, entry's %s", i, a.LeafHash, rec.LeafHash)
		}
		byID, err := l.EntryByID(e.ID)
		if err != nil || !reflect.DeepEqual(byID, rec) {
			t.Errorf("EntryByID(%q) = %+v, %v; want entry %d", e.ID, byID, err, i)
		}
	}
	if got := metricValue(t, s, "ledger_appended_entries_total", "log", "orders"); got != 5 {
		t.Errorf("ledger_appended_entries_total = %v, want 5", got)
	}
	if got := metricValue(t, s, "ledger_log_size_entries", "log", "orders"); got != 5 {
		t.Errorf("ledger_log_size_entries = %v, want 5", got)
	}
}

func TestAppendIdempotent(t *testing.T) {
	t.Parallel()
	full := Entry{ID: "x", HasKey: true, Key: []byte("k"), Time: t0, Source: &merkle.Source{Topic: "t", Partition: 2, Offset: 9}, Payload: []byte("p")}

	t.Run("across requests", func(t *testing.T) {
		s, _ := newTestStore(t)
		l := mustCreateLog(t, s, "a")
		r1 := mustAppend(t, l, Entry{ID: "first", Payload: []byte("0")}, full)
		root := mustRootAt(t, l, 2)
		retry := full
		retry.Key = append([]byte(nil), full.Key...) // equal content, different slices
		retry.PayloadJSON = true                     // not committed to
		r2 := mustAppend(t, l, retry)
		a := r2.Entries[0]
		if !a.Duplicate || a.Index != 1 || a.ID != "x" || a.LeafHash != r1.Entries[1].LeafHash {
			t.Errorf("retry = %+v, want duplicate of entry 1 (%+v)", a, r1.Entries[1])
		}
		if r2.Size != 2 || l.Size() != 2 || mustRootAt(t, l, 2) != root {
			t.Errorf("after retry: result size %d, log size %d; want 2 and the same root", r2.Size, l.Size())
		}
		if rec := mustEntry(t, l, 1); rec.PayloadJSON {
			t.Errorf("the retry's PayloadJSON overwrote the stored entry")
		}
		if got := metricValue(t, s, "ledger_duplicate_entries_total", "log", "a"); got != 1 {
			t.Errorf("ledger_duplicate_entries_total = %v, want 1", got)
		}
	})

	t.Run("within one request", func(t *testing.T) {
		s, _ := newTestStore(t)
		l := mustCreateLog(t, s, "a")
		y := Entry{ID: "y", Time: t0, Payload: []byte("y")}
		r := mustAppend(t, l, full, y, full, y, full)
		wantIdx := []uint64{0, 1, 0, 1, 0}
		wantDup := []bool{false, false, true, true, true}
		for i, a := range r.Entries {
			if a.Index != wantIdx[i] || a.Duplicate != wantDup[i] {
				t.Errorf("entry %d: Index %d Duplicate %v, want %d %v", i, a.Index, a.Duplicate, wantIdx[i], wantDup[i])
			}
		}
		if r.Entries[2].LeafHash != r.Entries[0].LeafHash {
			t.Errorf("duplicate within a request has a different leaf hash")
		}
		if r.Size != 2 || l.Size() != 2 {
			t.Errorf("size: result %d, log %d; want 2", r.Size, l.Size())
		}
		// A request mixing an old id and new ones.
		r = mustAppend(t, l, Entry{ID: "z", Time: t0}, full, Entry{ID: "w", Time: t0})
		if got := []uint64{r.Entries[0].Index, r.Entries[1].Index, r.Entries[2].Index}; !reflect.DeepEqual(got, []uint64{2, 0, 3}) {
			t.Errorf("mixed request indexes = %v, want [2 0 3]", got)
		}
		if !r.Entries[1].Duplicate || r.Entries[0].Duplicate || r.Entries[2].Duplicate {
			t.Errorf("mixed request duplicates = %v %v %v, want false true false", r.Entries[0].Duplicate, r.Entries[1].Duplicate, r.Entries[2].Duplicate)
		}
		if r.Size != 4 || l.Size() != 4 {
			t.Errorf("size: result %d, log %d; want 4", r.Size, l.Size())
		}
		if got := metricValue(t, s, "ledger_duplicate_entries_total", "log", "a"); got != 4 {
			t.Errorf("ledger_duplicate_entries_total = %v, want 4", got)
		}
	})

	t.Run("assigned time", func(t *testing.T) {
		clk := &stepClock{now: t0}
		s, _ := newTestStore(t, WithClock(clk.Now))
		l := mustCreateLog(t, s, "a")
		e := Entry{ID: "stamped", HasKey: true, Key: []byte("k"), Payload: []byte("p")}
		r1 := mustAppend(t, l, e)
		stamped := mustEntry(t, l, 0).Leaf.Time
		if stamped != t0.UnixNano() {
			t.Fatalf("arrival time %d, want the store clock's %d", stamped, t0.UnixNano())
		}
		clk.Add(time.Second) // a new arrival time would differ
		r2 := mustAppend(t, l, e)
		if a := r2.Entries[0]; !a.Duplicate || a.Index != 0 || a.LeafHash != r1.Entries[0].LeafHash {
			t.Errorf("retry of an entry without time = %+v, want duplicate of entry 0", a)
		}
		if l.Size() != 1 {
			t.Errorf("size %d, want 1", l.Size())
		}
		if got := mustEntry(t, l, 0).Leaf.Time; got != stamped {
			t.Errorf("stored arrival time changed from %d to %d", stamped, got)
		}
	})

	t.Run("derived id", func(t *testing.T) {
		clk := &stepClock{now: t0}
		s, _ := newTestStore(t, WithClock(clk.Now))
		l := mustCreateLog(t, s, "a")
		e := Entry{HasKey: true, Key: []byte("k"), Source: &merkle.Source{Topic: "t", Offset: 5}, Payload: []byte("no id")}
		other := Entry{Payload: []byte("no id either")}
		want := DeriveID(&e)
		if len(want) != 32 || want == DeriveID(&other) {
			t.Fatalf("DeriveID = %q (other %q): want 32 hex digits, distinct", want, DeriveID(&other))
		}
		r1 := mustAppend(t, l, e, other)
		if r1.Entries[0].ID != want || r1.Entries[1].ID != DeriveID(&other) {
			t.Errorf("ids = %q, %q; want %q, %q", r1.Entries[0].ID, r1.Entries[1].ID, want, DeriveID(&other))
		}
		if rec, err := l.EntryByID(want); err != nil || rec.Index != 0 || rec.Leaf.ID != want {
			t.Errorf("EntryByID(derived) = %v, %v", rec, err)
		}
		clk.Add(time.Second) // a new arrival time would differ
		r2 := mustAppend(t, l, e)
		if a := r2.Entries[0]; !a.Duplicate || a.Index != 0 || a.ID != want {
			t.Errorf("retry = %+v, want duplicate of entry 0 with id %q", a, want)
		}
		if l.Size() != 2 {
			t.Errorf("size %d, want 2", l.Size())
		}
	})
}

func TestAppendConflict(t *testing.T) {
	t.Parallel()
	base := Entry{ID: "c", HasKey: true, Key: []byte("k"), Time: t0, Source: &merkle.Source{Topic: "t", Partition: 1, Offset: 7}, Payload: []byte("p")}
	with := func(f func(e *Entry)) Entry {
		e := base
		f(&e)
		return e
	}
	cases := []struct {
		name          string
		stored, retry Entry
	}{
		{"payload", base, with(func(e *Entry) { e.Payload = []byte("q") })},
		{"key", base, with(func(e *Entry) { e.Key = []byte("k2") })},
		{"no key", base, with(func(e *Entry) { e.HasKey, e.Key = false, nil })},
		{"empty key", base, with(func(e *Entry) { e.Key = nil })},
		{"key added", with(func(e *Entry) { e.HasKey, e.Key = false, nil }), with(func(e *Entry) { e.Key = nil })},
		{"time", base, with(func(e *Entry) { e.Time = e.Time.Add(time.Nanosecond) })},
		{"time dropped", base, with(func(e *Entry) { e.Time = time.Time{} })},
		{"time given", with(func(e *Entry) { e.Time = time.Time{} }), base},
		{"source", base, with(func(e *Entry) { e.Source = &merkle.Source{Topic: "t", Partition: 1, Offset: 8} })},
		{"no source", base, with(func(e *Entry) { e.Source = nil })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStore(t)
			l := mustCreateLog(t, s, "c")
			mustAppend(t, l, Entry{ID: "a0", Time: t0}, tc.stored, Entry{ID: "a2", Time: t0})
			root := mustRootAt(t, l, 3)
			violations := metricValue(t, s, violationsMetric)

			req := []Entry{{ID: "n0", Time: t0}, {ID: "n1"}, tc.retry, {ID: "n3", Time: t0}}
			res, err := l.Append(testCtx(t, 10*time.Second), req)
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("Append = %+v, %v; want ErrConflict", res, err)
			}
			if res != nil {
				t.Errorf("refused request returned a result: %+v", res)
			}
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConflictError", err)
			}
			if ce.Index != 1 || ce.Item != 2 || ce.ID != "c" || ce.Log != "c" {
				t.Errorf("ConflictError = %+v, want Log c, ID c, Index 1, Item 2", *ce)
			}
			if l.Size() != 3 || mustRootAt(t, l, 3) != root {
				t.Errorf("size %d after refused request, want 3 and the same root", l.Size())
			}
			for _, id := range []string{"n0", "n1", "n3"} {
				if rec, err := l.EntryByID(id); !errors.Is(err, ErrNotFound) {
					t.Errorf("EntryByID(%q) after refused request = %v, %v; want ErrNotFound", id, rec, err)
				}
			}
			if got := metricValue(t, s, violationsMetric); got != violations+1 {
				t.Errorf("%s = %v, want %v", violationsMetric, got, violations+1)
			}
			if got := metricValue(t, s, violationsMetric, "log", "c"); got != 1 {
				t.Errorf("%s{log=c} = %v, want 1", violationsMetric, got)
			}
			// The stored entry is untouched, still a duplicate of itself, and
			// the refused request used up no indexes.
			if r := mustAppend(t, l, tc.stored); !r.Entries[0].Duplicate || r.Entries[0].Index != 1 {
				t.Errorf("retry of the stored entry = %+v, want duplicate of 1", r.Entries[0])
			}
			if r := mustAppend(t, l, req[0]); r.Entries[0].Index != 3 || r.Entries[0].Duplicate {
				t.Errorf("append after refused request = %+v, want new entry 3", r.Entries[0])
			}
		})
	}

	t.Run("within one request", func(t *testing.T) {
		s, _ := newTestStore(t)
		l := mustCreateLog(t, s, "c")
		mustAppend(t, l, Entry{ID: "a0", Time: t0})
		_, err := l.Append(testCtx(t, 10*time.Second), []Entry{base, {ID: "y", Time: t0}, with(func(e *Entry) { e.Payload = []byte("q") })})
		var ce *ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
			t.Fatalf("Append = %v, want a *ConflictError", err)
		}
		if ce.Item != 2 || ce.ID != "c" {
			t.Errorf("ConflictError = %+v, want ID c, Item 2", *ce)
		}
		if l.Size() != 1 {
			t.Errorf("size %d after refused request, want 1", l.Size())
		}
		for _, id := range []string{"c", "y"} {
			if _, err := l.EntryByID(id); !errors.Is(err, ErrNotFound) {
				t.Errorf("EntryByID(%q) after refused request: %v, want ErrNotFound", id, err)
			}
		}
	})

	t.Run("same group", func(t *testing.T) {
		// With a batch delay the two requests are committed together; which
		// one comes first is up to the scheduler, but exactly one wins.
		s, _ := newTestStore(t, WithBatchDelay(50*time.Millisecond))
		l := mustCreateLog(t, s, "c")
		reqs := [][]Entry{
			{{ID: "a", Time: t0}, base},
			{{ID: "b", Time: t0}, with(func(e *Entry) { e.Payload = []byte("q") }), {ID: "b2", Time: t0}},
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = l.Append(testCtx(t, 10*time.Second), reqs[i])
			}()
		}
		wg.Wait()
		win := 0
		if errs[0] != nil {
			win = 1
		}
		if errs[win] != nil || !errors.Is(errs[1-win], ErrConflict) {
			t.Fatalf("errors = %v; want one success and one ErrConflict", errs)
		}
		if l.Size() != uint64(len(reqs[win])) {
			t.Errorf("size %d, want %d (the winning request)", l.Size(), len(reqs[win]))
		}
		rec, err := l.EntryByID("c")
		if err != nil || !bytes.Equal(rec.Payload, reqs[win][1].Payload) {
			t.Errorf("EntryByID(c) = %v, %v; want the winner's payload %q", rec, err, reqs[win][1].Payload)
		}
		if _, err := l.EntryByID(reqs[1-win][0].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("the refused request's first entry is in the log (%v)", err)
		}
	})
}

func TestAppendInvalid(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "v")
	ctx := testCtx(t, 10*time.Second)
	for name, es := range map[string][]Entry{
		"nil batch":            nil,
		"empty batch":          {},
		"id too long":          {{ID: strings.Repeat("x", merkle.MaxID+1)}},
		"long id after a good": {{ID: "ok"}, {ID: strings.Repeat("x", merkle.MaxID+1)}},
		"id not UTF-8":         {{ID: "\xff\xfe"}},
		"key without HasKey":   {{ID: "k", Key: []byte("k")}},
	} {
		if res, err := l.Append(ctx, es); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Append = %+v, %v; want ErrInvalid", name, res, err)
		}
	}
	if l.Size() != 0 {
		t.Fatalf("size %d after invalid requests, want 0", l.Size())
	}
	if _, err := l.EntryByID("ok"); !errors.Is(err, ErrNotFound) {
		t.Errorf("valid entry of a refused request was appended (%v)", err)
	}
	r := mustAppend(t, l, Entry{ID: strings.Repeat("x", merkle.MaxID)})
	if r.Entries[0].Index != 0 {
		t.Errorf("id of exactly MaxID bytes: %+v", r.Entries[0])
	}
}

func TestLedgerLogNames(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	for _, name := range []string{"", "a/b", "../x", ".", "..", ".hidden", "-x", "_x", "a b", "a\nb", "é", strings.Repeat("a", 129), strings.Repeat("a", 200)} {
		if l, err := s.CreateLog(name); !errors.Is(err, ErrLogName) {
			t.Errorf("CreateLog(%q) = %v, %v; want ErrLogName", name, l, err)
		}
		if _, err := s.Log(name); !errors.Is(err, ErrLogNotFound) {
			t.Errorf("Log(%q) after refused CreateLog: %v, want ErrLogNotFound", name, err)
		}
	}
	if _, err := s.Log("nope"); !errors.Is(err, ErrLogNotFound) {
		t.Errorf("Log(nope): %v, want ErrLogNotFound", err)
	}
	for _, name := range []string{"a", "payments.0", "orders-http", "A_b-9.z", "9", strings.Repeat("a", 128)} {
		l := mustCreateLog(t, s, name)
		if l.Name() != name || l.Origin() != testKeyName+"/"+name || s.Origin(name) != l.Origin() {
			t.Errorf("log %q: Name %q, Origin %q", name, l.Name(), l.Origin())
		}
		if again := mustCreateLog(t, s, name); again != l {
			t.Errorf("CreateLog(%q) twice returned two logs", name)
		}
		if got := mustLog(t, s, name); got != l {
			t.Errorf("Log(%q) returned another log than CreateLog", name)
		}
	}
	if n := len(s.Logs()); n != 6 {
		t.Errorf("Logs() has %d logs, want 6", n)
	}
}

func TestLedgerRange(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	empty := mustCreateLog(t, s, "empty")
	if _, err := empty.Entry(0); !errors.Is(err, ErrRange) {
		t.Errorf("empty log: Entry(0): %v, want ErrRange", err)
	}
	if r := mustRootAt(t, empty, 0); r != merkle.EmptyRoot() {
		t.Errorf("empty log: RootAt(0) = %s, want the empty root", r)
	}
	if _, err := empty.InclusionProof(0, 0); !errors.Is(err, ErrRange) {
		t.Errorf("empty log: InclusionProof(0, 0): %v, want ErrRange", err)
	}

	l := mustCreateLog(t, s, "r")
	var es []Entry
	for i := range 5 {
		es = append(es, Entry{ID: fmt.Sprint("id", i), Time: t0, Payload: []byte{byte(i)}})
	}
	res := mustAppend(t, l, es...)
	const size = 5
	if _, err := l.Entry(size - 1); err != nil {
		t.Errorf("Entry(%d): %v", size-1, err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Entry(size)", func() error { _, err := l.Entry(size); return err }()},
		{"Entry(max)", func() error { _, err := l.Entry(math.MaxUint64); return err }()},
		{"InclusionProof(size, size)", func() error { _, err := l.InclusionProof(size, size); return err }()},
		{"InclusionProof(3, 3)", func() error { _, err := l.InclusionProof(3, 3); return err }()},
		{"InclusionProof(0, size+1)", func() error { _, err := l.InclusionProof(0, size+1); return err }()},
		{"ConsistencyProof(3, 2)", func() error { _, err := l.ConsistencyProof(3, 2); return err }()},
		{"ConsistencyProof(2, size+1)", func() error { _, err := l.ConsistencyProof(2, size+1); return err }()},
		{"RootAt(size+1)", func() error { _, err := l.RootAt(size + 1); return err }()},
	} {
		if !errors.Is(tc.err, ErrRange) {
			t.Errorf("%s: %v, want ErrRange", tc.name, tc.err)
		}
	}
	if rec, err := l.EntryByID("unknown"); !errors.Is(err, ErrNotFound) {
		t.Errorf("EntryByID(unknown) = %v, %v; want ErrNotFound", rec, err)
	}
	if _, err := empty.EntryByID("id0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("EntryByID of another log's id: %v, want ErrNotFound", err)
	}
	for i, a := range res.Entries {
		got, err := l.IndexByLeafHash(a.LeafHash)
		if err != nil || got != uint64(i) {
			t.Errorf("IndexByLeafHash(entry %d) = %d, %v", i, got, err)
		}
		if _, err := empty.IndexByLeafHash(a.LeafHash); !errors.Is(err, ErrNotFound) {
			t.Errorf("IndexByLeafHash of another log's leaf: %v, want ErrNotFound", err)
		}
	}
	var h merkle.Hash
	rand.Read(h[:])
	if i, err := l.IndexByLeafHash(h); !errors.Is(err, ErrNotFound) {
		t.Errorf("IndexByLeafHash(random) = %d, %v; want ErrNotFound", i, err)
	}
	// Proofs at every size verify against the root of that size.
	for n := uint64(1); n <= size; n++ {
		root := mustRootAt(t, l, n)
		for i := uint64(0); i < n; i++ {
			p, err := l.InclusionProof(i, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := merkle.VerifyInclusion(i, n, res.Entries[i].LeafHash, p, root); err != nil {
				t.Errorf("inclusion %d in %d: %v", i, n, err)
			}
		}
		for m := uint64(1); m <= n; m++ {
			p, err := l.ConsistencyProof(m, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := merkle.VerifyConsistency(m, n, p, mustRootAt(t, l, m), root); err != nil {
				t.Errorf("consistency %d to %d: %v", m, n, err)
			}
		}
	}
}

func TestLedgerWaitCheckpoint(t *testing.T) {
	t.Parallel()
	t.Run("covers size", func(t *testing.T) {
		s, v := newTestStore(t)
		l := mustCreateLog(t, s, "w")
		if cp := l.Checkpoint(); cp == nil || cp.Size != 0 || cp.Root != merkle.EmptyRoot() {
			t.Errorf("new log's checkpoint: %+v, want size 0 and the empty root", cp)
		}
		mustAppend(t, l, Entry{ID: "1"}, Entry{ID: "2"}, Entry{ID: "3"})
		cp, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 3)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size != 3 || cp.Origin != l.Origin() || cp.Root != mustRootAt(t, l, 3) {
			t.Errorf("checkpoint = %+v, want size 3, origin %q, root %s", cp.Checkpoint, l.Origin(), mustRootAt(t, l, 3))
		}
		c, err := merkle.OpenCheckpoint(cp.Note, v, l.Origin())
		if err != nil || c != cp.Checkpoint {
			t.Errorf("OpenCheckpoint(note) = %+v, %v; want %+v", c, err, cp.Checkpoint)
		}
		if got := l.Checkpoint(); got == nil || got.Size != 3 {
			t.Errorf("Checkpoint() = %v, want size 3", got)
		}
		// Already covered: returns at once.
		if cp1, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 1); err != nil || cp1.Size < 1 {
			t.Errorf("WaitCheckpoint(1) = %v, %v", cp1, err)
		}
	})

	t.Run("context", func(t *testing.T) {
		s, _ := newTestStore(t)
		l := mustCreateLog(t, s, "w")
		mustAppend(t, l, Entry{ID: "1"})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		cp, err := l.WaitCheckpoint(ctx, 1000)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitCheckpoint(1000) = %v, %v; want context.DeadlineExceeded", cp, err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if _, err := l.WaitCheckpoint(ctx, 1000); !errors.Is(err, context.Canceled) {
			t.Errorf("WaitCheckpoint with a cancelled context: %v, want context.Canceled", err)
		}
	})

	t.Run("interval", func(t *testing.T) {
		s, _ := newTestStore(t, WithCheckpointInterval(time.Hour))
		l := mustCreateLog(t, s, "w")
		mustAppend(t, l, Entry{ID: "1"})
		cp, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 1)
		if err != nil {
			t.Fatalf("first checkpoint not signed promptly: %v", err)
		}
		if cp.Size != 1 {
			t.Errorf("first checkpoint size %d, want 1", cp.Size)
		}
		mustAppend(t, l, Entry{ID: "2"})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if cp2, err := l.WaitCheckpoint(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("second checkpoint within the interval: %v, %v; want context.DeadlineExceeded", cp2, err)
		}
		if got := l.Checkpoint(); got.Size != 1 {
			t.Errorf("Checkpoint() size %d, want 1", got.Size)
		}
		// The empty log's checkpoint and the first of entries.
		if got := metricValue(t, s, "ledger_checkpoints_signed_total", "log", "w"); got != 2 {
			t.Errorf("ledger_checkpoints_signed_total = %v, want 2", got)
		}
		// Close signs a last checkpoint over the grown tree.
		s = reopen(t, s)
		if got := l.Checkpoint(); got.Size != 2 {
			t.Errorf("after Close: Checkpoint() size %d, want 2", got.Size)
		}
		if got := mustLog(t, s, "w").Checkpoint(); got == nil || got.Size != 2 {
			t.Errorf("after reopen: Checkpoint() = %v, want size 2", got)
		}
	})
}

// reopenEntry returns the i-th entry of the reopen tests: a mix of keys,
// assigned times, sources and payload kinds.
func reopenEntry(i int) Entry {
	e := Entry{ID: fmt.Sprintf("r-%05d", i), Payload: fmt.Appendf(nil, `{"n":%d}`, i), PayloadJSON: i%2 == 0}
	if i%7 != 0 {
		e.Time = t0.Add(time.Duration(i) * time.Millisecond)
	}
	if i%3 == 0 {
		e.HasKey, e.Key = true, fmt.Appendf(nil, "key-%d", i%11)
	}
	if i%5 == 0 {
		e.Source = &merkle.Source{Topic: "topic", Partition: int32(i % 4), Offset: int64(i)}
	}
	return e
}

func TestReopenPreservesState(t *testing.T) {
	t.Parallel()
	s, v := newTestStore(t)
	l := mustCreateLog(t, s, "r")
	other := mustCreateLog(t, s, "other")
	var leaves []merkle.Hash
	for i := 0; i < 250; i += 25 {
		var es []Entry
		for j := i; j < i+25; j++ {
			es = append(es, reopenEntry(j))
		}
		r := mustAppend(t, l, es...)
		for j, a := range r.Entries {
			if a.Index != uint64(i+j) {
				t.Fatalf("entry %d appended at %d", i+j, a.Index)
			}
			leaves = append(leaves, a.LeafHash)
		}
	}
	for i := range 7 {
		mustAppend(t, other, Entry{ID: fmt.Sprint(i), Payload: []byte("o")})
	}
	if _, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 250); err != nil {
		t.Fatal(err)
	}
	recs := make([]*Record, 250)
	for i := range recs {
		recs[i] = mustEntry(t, l, uint64(i))
	}
	sizes := []uint64{1, 2, 3, 15, 16, 17, 31, 32, 64, 100, 128, 200, 249, 250}
	roots := map[uint64]merkle.Hash{}
	for _, n := range sizes {
		roots[n] = mustRootAt(t, l, n)
		if roots[n] != rootOf(t, leaves[:n]) {
			t.Fatalf("RootAt(%d) does not match the root computed from the leaf hashes", n)
		}
	}
	logsBefore := s.Logs()
	historyBefore, err := l.Checkpoints(0, math.MaxUint64, 0)
	if err != nil {
		t.Fatal(err)
	}

	s = reopen(t, s)
	cpBefore := l.Checkpoint() // the last one, signed by Close
	l = mustLog(t, s, "r")

	check := func(t *testing.T, l *Log) {
		t.Helper()
		for _, n := range sizes {
			if got := mustRootAt(t, l, n); got != roots[n] {
				t.Errorf("RootAt(%d) = %s, want %s as before", n, got, roots[n])
			}
		}
		for i, want := range recs {
			if got := mustEntry(t, l, uint64(i)); !reflect.DeepEqual(got, want) {
				t.Errorf("Entry(%d) = %+v, want %+v", i, got, want)
			}
			if got, err := l.EntryByID(want.Leaf.ID); err != nil || got.Index != uint64(i) {
				t.Errorf("EntryByID(%q) = %v, %v; want entry %d", want.Leaf.ID, got, err, i)
			}
			if got, err := l.IndexByLeafHash(want.LeafHash); err != nil || got != uint64(i) {
				t.Errorf("IndexByLeafHash(entry %d) = %d, %v", i, got, err)
			}
		}
	}
	t.Run("after reopen", func(t *testing.T) {
		if got := s.Logs(); !reflect.DeepEqual(got, logsBefore) {
			t.Errorf("Logs() = %+v, want %+v", got, logsBefore)
		}
		if l.Size() != 250 {
			t.Fatalf("size %d, want 250", l.Size())
		}
		check(t, l)
		cp := l.Checkpoint()
		if cp == nil || cp.Checkpoint != cpBefore.Checkpoint || !bytes.Equal(cp.Note, cpBefore.Note) {
			t.Errorf("Checkpoint() = %v, want %+v", cp, cpBefore.Checkpoint)
		}
		history, err := l.Checkpoints(0, math.MaxUint64, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(history) < len(historyBefore) {
			t.Fatalf("checkpoint history shrank from %d to %d", len(historyBefore), len(history))
		}
		for i, cp := range historyBefore {
			if !bytes.Equal(history[i].Note, cp.Note) {
				t.Errorf("checkpoint %d changed across reopen", i)
			}
		}
		if got := metricValue(t, s, "ledger_log_size_entries", "log", "r"); got != 250 {
			t.Errorf("ledger_log_size_entries{log=r} = %v after reopen, want 250", got)
		}
	})

	// Appending continues at 250, across the first tile boundary (256).
	for _, span := range [][2]int{{250, 256}, {256, 257}, {257, 270}} {
		var es []Entry
		for j := span[0]; j < span[1]; j++ {
			es = append(es, reopenEntry(j))
		}
		r := mustAppend(t, l, es...)
		for j, a := range r.Entries {
			if a.Index != uint64(span[0]+j) || a.Duplicate {
				t.Fatalf("entry %d after reopen: %+v", span[0]+j, a)
			}
			leaves = append(leaves, a.LeafHash)
		}
	}
	t.Run("duplicates after reopen", func(t *testing.T) {
		// Entry 10 has a given time, entry 14 an assigned one.
		r := mustAppend(t, l, reopenEntry(10), reopenEntry(14))
		if a := r.Entries[0]; !a.Duplicate || a.Index != 10 {
			t.Errorf("retry of entry 10 after reopen = %+v, want duplicate of 10", a)
		}
		if a := r.Entries[1]; !a.Duplicate || a.Index != 14 {
			t.Errorf("retry of entry 14 (assigned time) after reopen = %+v, want duplicate of 14", a)
		}
		bad := reopenEntry(5)
		bad.Payload = []byte("changed")
		var ce *ConflictError
		if _, err := l.Append(testCtx(t, 10*time.Second), []Entry{bad}); !errors.As(err, &ce) || ce.Index != 5 {
			t.Errorf("conflicting retry of entry 5 after reopen: %v, want *ConflictError at 5", err)
		}
		if l.Size() != 270 {
			t.Errorf("size %d, want 270", l.Size())
		}
	})

	verify := func(t *testing.T, l *Log) {
		t.Helper()
		root := mustRootAt(t, l, 270)
		if want := rootOf(t, leaves); root != want {
			t.Fatalf("RootAt(270) = %s, want %s computed from the leaf hashes", root, want)
		}
		verifyInclusionAll(t, l, 270, leaves, root)
		var inconsistent []uint64
		for _, n := range sizes {
			p, err := l.ConsistencyProof(n, 270)
			if err != nil {
				t.Fatal(err)
			}
			if err := merkle.VerifyConsistency(n, 270, p, roots[n], root); err != nil {
				inconsistent = append(inconsistent, n)
			}
		}
		if len(inconsistent) > 0 {
			t.Errorf("consistency proofs to 270 from the roots before reopen fail for sizes %v", inconsistent)
		}
		check(t, l)
		for i := 250; i < 270; i++ {
			checkRecord(t, "r", uint64(i), mustEntry(t, l, uint64(i)), reopenEntry(i), time.Unix(0, 0), time.Now())
		}
	}
	t.Run("tree of 270", func(t *testing.T) {
		cp, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 270)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := merkle.OpenCheckpoint(cp.Note, v, l.Origin()); err != nil {
			t.Fatal(err)
		}
		if cp.Root != rootOf(t, leaves[:cp.Size]) {
			t.Errorf("checkpoint at %d does not match the leaf hashes", cp.Size)
		}
		verify(t, l)
	})
	t.Run("second reopen", func(t *testing.T) {
		s2 := reopen(t, s)
		l2 := mustLog(t, s2, "r")
		if l2.Size() != 270 {
			t.Fatalf("size %d, want 270", l2.Size())
		}
		verify(t, l2)
		if o := mustLog(t, s2, "other"); o.Size() != 7 {
			t.Errorf("log other: size %d, want 7", o.Size())
		}
	})
}

func TestReopenAcrossTileBoundaries(t *testing.T) {
	targets := []int{0, 1, 15, 16, 17, 31, 250, 255, 256, 257, 272, 300, 511, 512, 513, 4095, 4096, 4097}
	if !testing.Short() {
		targets = append(targets, 65535, 65536, 65537)
	}
	s, _ := newTestStore(t)
	mustCreateLog(t, s, "b")
	var leaves []merkle.Hash
	roots := map[int]merkle.Hash{}
	for _, target := range targets {
		l := mustLog(t, s, "b")
		for len(leaves) < target {
			n := min(target-len(leaves), 4096)
			es := make([]Entry, n)
			for j := range es {
				es[j] = Entry{ID: fmt.Sprint("b", len(leaves)+j), Time: t0, Payload: []byte{byte(j)}}
			}
			for _, a := range mustAppend(t, l, es...).Entries {
				if a.Index != uint64(len(leaves)) {
					t.Fatalf("appended at %d, want %d", a.Index, len(leaves))
				}
				leaves = append(leaves, a.LeafHash)
			}
		}
		s = reopen(t, s)
		l = mustLog(t, s, "b")
		if l.Size() != uint64(target) {
			t.Fatalf("reopened at %d: size %d", target, l.Size())
		}
		roots[target] = rootOf(t, leaves)
		// Every earlier size still has the root it had.
		for n, want := range roots {
			if got := mustRootAt(t, l, uint64(n)); got != want {
				t.Errorf("reopened at %d: RootAt(%d) = %s, want %s", target, n, got, want)
			}
		}
		// Inclusion proofs of a sample of leaves, dense around tile edges.
		root := roots[target]
		for i := 0; i < target; i++ {
			if !sampleLeaf(i, target) {
				continue
			}
			p, err := l.InclusionProof(uint64(i), uint64(target))
			if err != nil {
				t.Fatal(err)
			}
			if err := merkle.VerifyInclusion(uint64(i), uint64(target), leaves[i], p, root); err != nil {
				t.Errorf("reopened at %d: inclusion of %d: %v", target, i, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// sampleLeaf reports whether the tile boundary test checks the inclusion
// proof of leaf i in a tree of the given size: all of a small tree, else a
// stride plus the leaves around tile edges and at the end.
func sampleLeaf(i, size int) bool {
	switch {
	case size <= 600, i >= size-20, i%997 == 0:
		return true
	case size <= 5000:
		return i%256 <= 17 || i%256 >= 240
	default:
		return i%65536 <= 17 || i%65536 >= 65536-17
	}
}

func TestLedgerCheckpointHistory(t *testing.T) {
	t.Parallel()
	s, v := newTestStore(t, WithCheckpointInterval(time.Millisecond))
	l := mustCreateLog(t, s, "h")
	var sizes []uint64
	for i := range 12 {
		var es []Entry
		for j := 0; j <= i; j++ {
			es = append(es, Entry{ID: fmt.Sprint(i, "-", j), Payload: []byte("x")})
		}
		r := mustAppend(t, l, es...)
		if _, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), r.Size); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, r.Size)
	}
	cps, err := l.Checkpoints(0, math.MaxUint64, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, cp := range cps {
		got = append(got, cp.Size)
	}
	// Each append was waited for before the next, so each size has exactly
	// one checkpoint.
	// The first is the empty log's, signed when it was created.
	if want := append([]uint64{0}, sizes...); !reflect.DeepEqual(got, want) {
		t.Fatalf("checkpoint sizes = %v, want %v", got, want)
	}
	for i, cp := range cps {
		n, err := note.Open(cp.Note, note.VerifierList(v))
		if err != nil {
			t.Errorf("checkpoint %d: note.Open: %v", i, err)
			continue
		}
		c, err := merkle.OpenCheckpoint(cp.Note, v, l.Origin())
		if err != nil || c != cp.Checkpoint {
			t.Errorf("checkpoint %d: OpenCheckpoint = %+v, %v; want %+v", i, c, err, cp.Checkpoint)
		}
		if n.Text != string(cp.Checkpoint.Text()) {
			t.Errorf("checkpoint %d: note text %q, want %q", i, n.Text, cp.Checkpoint.Text())
		}
		if root := mustRootAt(t, l, cp.Size); root != cp.Root {
			t.Errorf("checkpoint %d at size %d: root %s, RootAt %s", i, cp.Size, cp.Root, root)
		}
		if i == 0 {
			continue
		}
		prev := cps[i-1]
		p, err := l.ConsistencyProof(prev.Size, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := merkle.VerifyConsistency(prev.Size, cp.Size, p, prev.Root, cp.Root); err != nil {
			t.Errorf("checkpoints %d and %d are not consistent: %v", prev.Size, cp.Size, err)
		}
	}
	if last := l.Checkpoint(); !bytes.Equal(last.Note, cps[len(cps)-1].Note) {
		t.Errorf("Checkpoint() is not the last of the history")
	}
	// Bounds and limit.
	if two, err := l.Checkpoints(1, math.MaxUint64, 2); err != nil || len(two) != 2 || two[0].Size != sizes[0] || two[1].Size != sizes[1] {
		t.Errorf("Checkpoints(0, max, 2) = %d checkpoints, %v", len(two), err)
	}
	if one, err := l.Checkpoints(sizes[3], sizes[3], 0); err != nil || len(one) != 1 || one[0].Size != sizes[3] {
		t.Errorf("Checkpoints(%d, %d, 0) = %v, %v", sizes[3], sizes[3], one, err)
	}
	if mid, err := l.Checkpoints(sizes[2]+1, sizes[5], 0); err != nil || len(mid) != 3 || mid[0].Size != sizes[3] || mid[2].Size != sizes[5] {
		t.Errorf("Checkpoints(%d, %d, 0) = %d checkpoints, %v", sizes[2]+1, sizes[5], len(mid), err)
	}
	if none, err := l.Checkpoints(sizes[len(sizes)-1]+1, math.MaxUint64, 0); err != nil || len(none) != 0 {
		t.Errorf("Checkpoints beyond the last = %d, %v", len(none), err)
	}
}

func TestAppendConcurrent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"grouped", []Option{WithBatchDelay(2 * time.Millisecond), WithMaxBatch(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStore(t, tc.opts...)
			logs := []*Log{mustCreateLog(t, s, "c0"), mustCreateLog(t, s, "c1")}
			const (
				workers  = 8
				requests = 40
				ids      = 120
			)
			entry := func(n int) Entry {
				e := Entry{ID: fmt.Sprint("id-", n), HasKey: true, Key: fmt.Append(nil, n%9), Payload: fmt.Append(nil, "payload ", n)}
				if n%5 != 0 {
					e.Time = t0.Add(time.Duration(n))
				}
				return e
			}
			type seen struct {
				mu  sync.Mutex
				idx map[string][]uint64
			}
			got := []*seen{{idx: map[string][]uint64{}}, {idx: map[string][]uint64{}}}
			var (
				wg    sync.WaitGroup
				errMu sync.Mutex
				errs  []error
			)
			fail := func(err error) {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range requests {
						li := (w + r) % 2
						var es []Entry
						for k := 0; k <= (w+r)%5; k++ {
							es = append(es, entry((w*7+r*13+k*31)%ids))
						}
						res, err := logs[li].Append(context.Background(), es)
						if err != nil {
							fail(fmt.Errorf("worker %d request %d: %w", w, r, err))
							return
						}
						if res.Size == 0 || len(res.Entries) != len(es) {
							fail(fmt.Errorf("worker %d request %d: result %+v", w, r, res))
							return
						}
						got[li].mu.Lock()
						for _, a := range res.Entries {
							if a.Index >= res.Size {
								fail(fmt.Errorf("%s: index %d not covered by result size %d", a.ID, a.Index, res.Size))
							}
							got[li].idx[a.ID] = append(got[li].idx[a.ID], a.Index)
						}
						got[li].mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				t.FailNow()
			}
			for li, l := range logs {
				size := l.Size()
				if size != uint64(len(got[li].idx)) {
					t.Errorf("%s: size %d, want %d distinct ids", l.Name(), size, len(got[li].idx))
				}
				held := map[string]uint64{}
				leaves := make([]merkle.Hash, size)
				for i := uint64(0); i < size; i++ {
					rec := mustEntry(t, l, i)
					if j, dup := held[rec.Leaf.ID]; dup {
						t.Errorf("%s: id %q at %d and %d", l.Name(), rec.Leaf.ID, j, i)
					}
					held[rec.Leaf.ID] = i
					leaves[i] = rec.LeafHash
				}
				for id, idx := range got[li].idx {
					for _, i := range idx {
						if i != held[id] {
							t.Errorf("%s: id %q returned index %d, log holds it at %d (all returned: %v)", l.Name(), id, i, held[id], idx)
							break
						}
					}
				}
				root := mustRootAt(t, l, size)
				if root != rootOf(t, leaves) {
					t.Errorf("%s: root does not match the entries", l.Name())
				}
				verifyInclusionAll(t, l, size, leaves, root)
			}
		})
	}
}

func TestLedgerManyLogs(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	names := []string{"zeta", "alpha", "m.1", "Beta", "m-0", "m_2", "9x", "alpha.0"}
	for i, name := range names {
		l := mustCreateLog(t, s, name)
		var es []Entry
		for j := 0; j <= i; j++ {
			// The same ids in every log: logs are independent.
			es = append(es, Entry{ID: fmt.Sprint("e", j), Time: t0, Payload: []byte(name)})
		}
		for j, a := range mustAppend(t, l, es...).Entries {
			if a.Index != uint64(j) || a.Duplicate {
				t.Errorf("%s: entry %d = %+v", name, j, a)
			}
		}
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	infos := s.Logs()
	if len(infos) != len(names) {
		t.Fatalf("Logs() has %d logs, want %d", len(infos), len(names))
	}
	roots := map[merkle.Hash]string{}
	for i, info := range infos {
		if info.Name != sorted[i] {
			t.Errorf("Logs()[%d] = %q, want %q", i, info.Name, sorted[i])
		}
		l := mustLog(t, s, info.Name)
		want := uint64(1 + indexOf(names, info.Name))
		if info.Size != want || l.Size() != want {
			t.Errorf("%s: LogInfo size %d, log size %d; want %d", info.Name, info.Size, l.Size(), want)
		}
		if r := mustRootAt(t, l, info.Size); info.Root != r {
			t.Errorf("%s: LogInfo root %s, RootAt %s", info.Name, info.Root, r)
		}
		if prev, dup := roots[info.Root]; dup {
			t.Errorf("logs %s and %s have the same root", prev, info.Name)
		}
		roots[info.Root] = info.Name
		if rec, err := l.EntryByID("e0"); err != nil || rec.Leaf.Log != info.Name || string(rec.Payload) != info.Name {
			t.Errorf("%s: EntryByID(e0) = %+v, %v", info.Name, rec, err)
		}
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func TestLedgerClose(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l := mustCreateLog(t, s, "c")
	mustAppend(t, l, Entry{ID: "before"})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Repeat: a closed store must refuse every time, not by chance.
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		res, err := l.Append(ctx, []Entry{{ID: fmt.Sprint("after", i)}})
		cancel()
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Close (attempt %d) = %+v, %v; want ErrClosed", i, res, err)
		}
	}
	if _, err := s.CreateLog("new"); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateLog after Close: %v, want ErrClosed", err)
	}
	if _, err := l.WaitCheckpoint(testCtx(t, 5*time.Second), 2); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitCheckpoint after Close: %v, want ErrClosed", err)
	}
	// The last checkpoint was signed on Close.
	if cp := l.Checkpoint(); cp == nil || cp.Size != 1 {
		t.Errorf("Checkpoint() after Close = %v, want size 1", cp)
	}
}

// A log from LogForAppend exists only once an append to it has succeeded.
func TestLogForAppendCreatedByFirstCommit(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t)
	l, err := s.LogForAppend("lazy")
	if err != nil {
		t.Fatal(err)
	}
	bad := []Entry{{ID: "x", Payload: []byte("1")}, {ID: "x", Payload: []byte("2")}}
	var ce *ConflictError
	if _, err := l.Append(context.Background(), bad); !errors.As(err, &ce) || ce.EarlierItem != 0 || ce.Item != 1 {
		t.Fatalf("self-contradicting request: %v, want a ConflictError between items 0 and 1", err)
	}
	if _, err := s.Log("lazy"); !errors.Is(err, ErrLogNotFound) {
		t.Fatalf("after a refused first append Log = %v, want ErrLogNotFound", err)
	}
	if len(s.Logs()) != 0 {
		t.Fatalf("Logs() = %v, want none", s.Logs())
	}
	if _, err := l.Append(context.Background(), []Entry{{ID: "y", Payload: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Log("lazy"); err != nil || got != l || got.Size() != 1 {
		t.Fatalf("after the first append Log = %v, %v", got, err)
	}
	// CreateLog of an existing log is a no-op; of a new one, durable at once.
	if _, err := s.CreateLog("lazy"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateLog("eager"); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	var names []string
	for _, li := range s.Logs() {
		names = append(names, fmt.Sprintf("%s:%d", li.Name, li.Size))
	}
	if want := []string{"eager:0", "lazy:1"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("after reopen Logs() = %v, want %v", names, want)
	}
}

// A log whose tree grew past its last checkpoint before a crash is signed
// on open, without waiting for another append.
func TestReopenSignsUncoveredTree(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, WithCheckpointInterval(time.Hour))
	l := mustCreateLog(t, s, "a")
	mustAppend(t, l, Entry{ID: "1", Payload: []byte("1")})
	if _, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	// The hour-long interval holds this append's checkpoint back.
	mustAppend(t, l, Entry{ID: "2", Payload: []byte("2")})
	if cp := l.Checkpoint(); cp.Size != 1 {
		t.Fatalf("checkpoint size %d before reopen, want 1", cp.Size)
	}
	s = reopen(t, s)
	l, err := s.Log("a")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := l.WaitCheckpoint(testCtx(t, 10*time.Second), 2)
	if err != nil {
		t.Fatalf("no checkpoint covering size 2 after reopen: %v", err)
	}
	if cp.Size != 2 {
		t.Fatalf("checkpoint size %d, want 2", cp.Size)
	}
}

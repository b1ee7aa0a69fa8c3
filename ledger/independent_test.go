package ledger_test

// The acceptance test: everything the ledger commits to is checked with
// golang.org/x/mod/sumdb/tlog and golang.org/x/mod/sumdb/note, an
// implementation of RFC 6962 and signed notes that shares no code with
// auditd's, starting only from the bytes of each entry's leaf.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

const indepKeyName = "independent.example"

// newIndepKeys makes a fresh Ed25519 key.
func newIndepKeys(t testing.TB) ledgertest.Key { return ledgertest.NewKey(t, indepKeyName) }

// openIndep opens the store in dir; it is closed when the test ends unless
// the caller closes it first.
func openIndep(t testing.TB, dir string, k ledgertest.Key, opts ...ledger.Option) *ledger.Store {
	t.Helper()
	return ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(k), ledgertest.WithLedger(opts...))
}

// indepEntry returns the i'th test entry. The entries vary every optional
// field: producer and derived ids, no key, an empty key, a binary key,
// producer and assigned times, source positions, JSON and binary payloads.
func indepEntry(i int) ledger.Entry {
	var e ledger.Entry
	if i%5 != 0 {
		e.ID = fmt.Sprintf("evt-%06d", i) // else derived from the content
	}
	switch {
	case i%7 == 0:
		e.HasKey = true // empty key
	case i%3 == 0:
		e.HasKey, e.Key = true, []byte(fmt.Sprintf("customer-%d", i%11))
	case i%13 == 0:
		e.HasKey, e.Key = true, []byte{0xff, byte(i), 0, byte(i >> 8)}
	}
	if i%4 != 0 {
		e.Time = time.Unix(1_700_000_000+int64(i), int64(i)*1000+7)
	}
	if i%6 == 0 {
		e.Source = &merkle.Source{Topic: "payments", Partition: int32(i % 3), Offset: int64(i)}
	}
	if i%2 == 0 {
		e.Payload, e.PayloadJSON = []byte(fmt.Sprintf(`{"n":%d,"amount":%d}`, i, i*37%1000)), true
	} else {
		e.Payload = bytes.Repeat([]byte{byte(i)}, i%40)
	}
	return e
}

// indepSizes returns request sizes that cycle through small, odd and large
// batches, covering total entries.
func indepSizes(total int, pattern []int) []int {
	var out []int
	for n, k := 0, 0; n < total; k++ {
		s := min(pattern[k%len(pattern)], total-n)
		out = append(out, s)
		n += s
	}
	return out
}

// tlogLog is the independent copy of the tree: the leaves as the ledger
// returned them and tlog's stored hashes over them.
type tlogLog struct {
	leaves [][]byte
	stored []tlog.Hash
	roots  map[int64]tlog.Hash
}

// ReadHashes implements tlog.HashReader.
func (tl *tlogLog) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x < 0 || x >= int64(len(tl.stored)) {
			return nil, fmt.Errorf("tlog stored hash %d not held", x)
		}
		out[i] = tl.stored[x]
	}
	return out, nil
}

func (tl *tlogLog) add(t testing.TB, leaf []byte) {
	hs, err := tlog.StoredHashes(int64(len(tl.leaves)), leaf, tl)
	if err != nil {
		t.Fatal(err)
	}
	tl.leaves = append(tl.leaves, leaf)
	tl.stored = append(tl.stored, hs...)
}

func (tl *tlogLog) root(t testing.TB, size uint64) tlog.Hash {
	if h, ok := tl.roots[int64(size)]; ok {
		return h
	}
	h, err := tlog.TreeHash(int64(size), tl)
	if err != nil {
		t.Fatalf("tlog.TreeHash(%d): %v", size, err)
	}
	if tl.roots == nil {
		tl.roots = map[int64]tlog.Hash{}
	}
	tl.roots[int64(size)] = h
	return h
}

func toTlog(hs []merkle.Hash) []tlog.Hash {
	out := make([]tlog.Hash, len(hs))
	for i, h := range hs {
		out[i] = tlog.Hash(h)
	}
	return out
}

// readLeaves reads the entries [len(tl.leaves), size) from the log into tl,
// checking each record against the entry that was appended.
func readLeaves(t testing.TB, l *ledger.Log, tl *tlogLog, size uint64, want func(i uint64) (ledger.Entry, string)) {
	t.Helper()
	for i := uint64(len(tl.leaves)); i < size; i++ {
		rec, err := l.Entry(i)
		if err != nil {
			t.Fatalf("Entry(%d): %v", i, err)
		}
		if rec.Index != i {
			t.Fatalf("Entry(%d) has index %d", i, rec.Index)
		}
		if h := tlog.RecordHash(rec.LeafBytes); rec.LeafHash != merkle.Hash(h) {
			t.Fatalf("entry %d: LeafHash %s, tlog.RecordHash(LeafBytes) %s", i, rec.LeafHash, h)
		}
		checkRecord(t, l.Name(), rec, want)
		tl.add(t, rec.LeafBytes)
	}
}

// checkRecord checks that the leaf bytes, decoded by hand, hold what the
// producer sent.
func checkRecord(t testing.TB, log string, rec *ledger.Record, want func(i uint64) (ledger.Entry, string)) {
	t.Helper()
	e, id := want(rec.Index)
	var got merkle.Leaf
	if err := got.UnmarshalBinary(rec.LeafBytes); err != nil {
		t.Fatalf("entry %d: leaf bytes do not decode: %v", rec.Index, err)
	}
	ok := got.Log == log && got.ID == id && got.HasKey == e.HasKey && bytes.Equal(got.Key, e.Key) &&
		got.TimeAssigned == e.Time.IsZero() && got.PayloadSHA256 == sha256.Sum256(e.Payload) &&
		(e.Time.IsZero() || got.Time == e.Time.UnixNano()) &&
		(got.Source == nil) == (e.Source == nil) && (e.Source == nil || *got.Source == *e.Source)
	if !ok {
		t.Fatalf("entry %d: leaf %+v does not match the appended entry %+v (id %q)", rec.Index, got, e, id)
	}
	if !bytes.Equal(rec.Payload, e.Payload) || rec.PayloadJSON != e.PayloadJSON || rec.PayloadPruned {
		t.Fatalf("entry %d: payload %q json %v pruned %v, want %q json %v", rec.Index, rec.Payload, rec.PayloadJSON, rec.PayloadPruned, e.Payload, e.PayloadJSON)
	}
}

func checkInclusion(t testing.TB, l *ledger.Log, tl *tlogLog, index, size uint64) {
	t.Helper()
	p, err := l.InclusionProof(index, size)
	if err != nil {
		t.Fatalf("InclusionProof(%d, %d): %v", index, size, err)
	}
	if err := tlog.CheckRecord(toTlog(p), int64(size), tl.root(t, size), int64(index), tlog.RecordHash(tl.leaves[index])); err != nil {
		t.Fatalf("tlog.CheckRecord(InclusionProof(%d, %d)): %v", index, size, err)
	}
}

func checkConsistency(t testing.TB, l *ledger.Log, tl *tlogLog, from, to uint64) {
	t.Helper()
	p, err := l.ConsistencyProof(from, to)
	if err != nil {
		t.Fatalf("ConsistencyProof(%d, %d): %v", from, to, err)
	}
	if err := tlog.CheckTree(toTlog(p), int64(to), tl.root(t, to), int64(from), tl.root(t, from)); err != nil {
		t.Fatalf("tlog.CheckTree(ConsistencyProof(%d, %d)): %v", from, to, err)
	}
}

func checkRoot(t testing.TB, l *ledger.Log, tl *tlogLog, size uint64) {
	t.Helper()
	got, err := l.RootAt(size)
	if err != nil {
		t.Fatalf("RootAt(%d): %v", size, err)
	}
	if want := tl.root(t, size); got != merkle.Hash(want) {
		t.Fatalf("RootAt(%d) = %s, tlog.TreeHash %s", size, got, want)
	}
}

// checkTiles compares every C2SP tile of the tree, full or partial, with the
// tile tlog computes.
func checkTiles(t testing.TB, l *ledger.Log, tl *tlogLog, size uint64) {
	t.Helper()
	for lvl := 0; size>>(8*lvl) > 0; lvl++ {
		count := size >> (8 * lvl)
		for n := uint64(0); n*256 < count; n++ {
			w := int(min(256, count-n*256))
			got, err := l.Tile(uint8(lvl), n, w)
			if err != nil {
				t.Fatalf("Tile(%d, %d, %d): %v", lvl, n, w, err)
			}
			want, err := tlog.ReadTileData(tlog.Tile{H: 8, L: lvl, N: int64(n), W: w}, tl)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("tile %d/%d of width %d differs from tlog's", lvl, n, w)
			}
		}
	}
}

// checkCheckpoints opens every stored checkpoint with sumdb/note and parses
// its body by hand: origin "<key name>/<log>", decimal size, base64 root,
// which must be tlog's root at that size.
func checkCheckpoints(t testing.TB, l *ledger.Log, tl *tlogLog, v note.Verifier) []*ledger.SignedCheckpoint {
	t.Helper()
	cps, err := l.Checkpoints(0, ^uint64(0), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) == 0 {
		t.Fatal("no checkpoints stored")
	}
	wantOrigin := indepKeyName + "/" + l.Name()
	var last uint64
	for i, cp := range cps {
		n, err := note.Open(cp.Note, note.VerifierList(v))
		if err != nil {
			t.Fatalf("checkpoint %d: note.Open: %v\n%s", i, err, cp.Note)
		}
		if len(n.Sigs) != 1 || n.Sigs[0].Name != indepKeyName || n.Sigs[0].Hash != v.KeyHash() {
			t.Fatalf("checkpoint %d: signatures %+v", i, n.Sigs)
		}
		lines := strings.SplitN(n.Text, "\n", 4)
		if len(lines) != 4 || lines[3] != "" {
			t.Fatalf("checkpoint %d: body %q is not three lines", i, n.Text)
		}
		if lines[0] != wantOrigin {
			t.Fatalf("checkpoint %d: origin %q, want %q", i, lines[0], wantOrigin)
		}
		size, err := strconv.ParseUint(lines[1], 10, 64)
		if err != nil || strconv.FormatUint(size, 10) != lines[1] {
			t.Fatalf("checkpoint %d: size %q", i, lines[1])
		}
		root, err := base64.StdEncoding.DecodeString(lines[2])
		if err != nil || len(root) != 32 {
			t.Fatalf("checkpoint %d: root %q", i, lines[2])
		}
		if size > uint64(len(tl.leaves)) {
			t.Fatalf("checkpoint %d: size %d beyond the %d entries appended", i, size, len(tl.leaves))
		}
		if i > 0 && size <= last {
			t.Fatalf("checkpoint %d: size %d after %d", i, size, last)
		}
		last = size
		if want := tl.root(t, size); !bytes.Equal(root, want[:]) {
			t.Fatalf("checkpoint %d at size %d: root %s, tlog.TreeHash %s", i, size, lines[2], want)
		}
		if cp.Origin != wantOrigin || cp.Size != size || !bytes.Equal(cp.Root[:], root) {
			t.Fatalf("checkpoint %d: fields %s/%d/%s disagree with its note", i, cp.Origin, cp.Size, cp.Root)
		}
	}
	return cps
}

func TestIndependentVerification(t *testing.T) {
	t.Parallel()
	const total = 300
	k := newIndepKeys(t)
	// Interval 0: a checkpoint after every group commit, so there are many
	// to check.
	st := openIndep(t, t.TempDir(), k, ledger.WithCheckpointInterval(0))
	l, err := st.CreateLog("payments.0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, total)
	boundaries := map[uint64]bool{0: true} // an empty tree may be signed too
	next := 0
	for _, n := range indepSizes(total, []int{1, 2, 7, 50, 3, 1, 100, 13, 64, 5}) {
		es := make([]ledger.Entry, n)
		for j := range es {
			es[j] = indepEntry(next + j)
		}
		res, err := l.Append(ctx, es)
		if err != nil {
			t.Fatalf("Append of %d entries at %d: %v", n, next, err)
		}
		for j, a := range res.Entries {
			if a.Index != uint64(next+j) || a.Duplicate {
				t.Fatalf("entry %d appended at %d (duplicate %v)", next+j, a.Index, a.Duplicate)
			}
			ids[next+j] = a.ID
		}
		next += n
		if res.Size != uint64(next) {
			t.Fatalf("Append result size %d, want %d", res.Size, next)
		}
		boundaries[uint64(next)] = true
	}
	if _, err := l.WaitCheckpoint(ctx, total); err != nil {
		t.Fatal(err)
	}
	want := func(i uint64) (ledger.Entry, string) { return indepEntry(int(i)), ids[i] }

	tl := &tlogLog{}
	readLeaves(t, l, tl, total, want)

	for size := uint64(0); size <= total; size++ {
		checkRoot(t, l, tl, size)
	}
	for size := uint64(1); size <= total; size++ {
		for index := uint64(0); index < size; index++ {
			checkInclusion(t, l, tl, index, size)
		}
	}
	for to := uint64(1); to <= total; to++ {
		for from := uint64(1); from <= to; from++ {
			checkConsistency(t, l, tl, from, to)
		}
	}
	checkTiles(t, l, tl, total)
	cps := checkCheckpoints(t, l, tl, k.Verifier)
	for _, cp := range cps {
		// Checkpoints are signed only over whole group commits.
		if !boundaries[cp.Size] {
			t.Errorf("checkpoint at size %d is not at the end of an append", cp.Size)
		}
	}
	if got := cps[len(cps)-1].Size; got != total {
		t.Errorf("last checkpoint at size %d, want %d", got, total)
	}
	t.Logf("%d checkpoints verified", len(cps))
	// auditd's own scrub and checkpoint audit agree with tlog: clean.
	scrubClean(t, st, k.Verifier, total)

	// The indexes find every entry by its id and its leaf hash.
	for i := uint64(0); i < total; i++ {
		rec, err := l.EntryByID(ids[i])
		if err != nil || rec.Index != i {
			t.Fatalf("EntryByID(%q) = %v, %v; want entry %d", ids[i], rec, err, i)
		}
		idx, err := l.IndexByLeafHash(merkle.Hash(tlog.RecordHash(tl.leaves[i])))
		if err != nil || idx != i {
			t.Fatalf("IndexByLeafHash of entry %d = %d, %v", i, idx, err)
		}
	}

	// Out of range requests are refused.
	for _, c := range [][2]uint64{{0, 0}, {total, total}, {0, total + 1}, {total + 1, total + 2}} {
		if _, err := l.InclusionProof(c[0], c[1]); !errors.Is(err, ledger.ErrRange) {
			t.Errorf("InclusionProof(%d, %d) = %v, want ErrRange", c[0], c[1], err)
		}
	}
	for _, c := range [][2]uint64{{2, 1}, {1, total + 1}, {total + 1, total + 1}} {
		if _, err := l.ConsistencyProof(c[0], c[1]); !errors.Is(err, ledger.ErrRange) {
			t.Errorf("ConsistencyProof(%d, %d) = %v, want ErrRange", c[0], c[1], err)
		}
	}
	if _, err := l.Entry(total); !errors.Is(err, ledger.ErrRange) {
		t.Errorf("Entry(%d) = %v, want ErrRange", total, err)
	}
}

// TestIndependentReopen closes and reopens the store at sizes that leave
// partial tiles (with and without complete level-4 nodes) at every tile
// level, appends more after each reopen, and checks the tree against tlog.
func TestIndependentReopen(t *testing.T) {
	t.Parallel()
	k := newIndepKeys(t)
	dir := t.TempDir()
	stops := []uint64{1, 16, 17, 255, 256, 257, 300, 4111, 4112}
	ctx := context.Background()
	tl := &tlogLog{}
	ids := map[uint64]string{}
	want := func(i uint64) (ledger.Entry, string) { return indepEntry(int(i)), ids[i] }
	var size uint64
	for _, stop := range stops {
		st, err := ledger.Open(dir, k.Signer, k.Verifier)
		if err != nil {
			t.Fatalf("open at size %d: %v", size, err)
		}
		l, err := st.CreateLog("orders-http")
		if err != nil {
			t.Fatal(err)
		}
		if l.Size() != size {
			t.Fatalf("reopened log has size %d, want %d", l.Size(), size)
		}
		if size > 0 {
			checkRoot(t, l, tl, size)
			if cp := l.Checkpoint(); cp == nil || cp.Size != size {
				t.Fatalf("reopened log's checkpoint %v, want size %d", cp, size)
			}
		}
		for size < stop {
			n := min(stop-size, 1+size%97)
			es := make([]ledger.Entry, n)
			for j := range es {
				es[j] = indepEntry(int(size) + j)
			}
			res, err := l.Append(ctx, es)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range res.Entries {
				ids[a.Index] = a.ID
			}
			size = res.Size
		}
		readLeaves(t, l, tl, size, want)
		checkRoot(t, l, tl, size)
		checkTiles(t, l, tl, size)
		if _, err := l.WaitCheckpoint(ctx, size); err != nil {
			t.Fatal(err)
		}
		scrubClean(t, st, k.Verifier, int(size))
		// Every leaf in the new tree, and the new tree against every size
		// it extends.
		for i := uint64(0); i < size; i++ {
			checkInclusion(t, l, tl, i, size)
		}
		for from := uint64(1); from <= size; from++ {
			checkConsistency(t, l, tl, from, size)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st := openIndep(t, dir, k)
	l, err := st.Log("orders-http")
	if err != nil {
		t.Fatal(err)
	}
	checkCheckpoints(t, l, tl, k.Verifier)
	// Proofs between the sizes where the store was closed.
	for i, to := range stops {
		for _, from := range stops[:i+1] {
			checkConsistency(t, l, tl, from, to)
		}
		for _, idx := range []uint64{0, to / 2, to - 1} {
			checkInclusion(t, l, tl, idx, to)
		}
	}
}

// TestReopenPartialTileKeepsMidHashes is the smallest case of
// TestIndependentReopen: a store closed at 16 entries (a partial tile that
// already holds one level-4 hash), reopened, and appended to once. The tree
// hashes in storage must still give the root the writer committed, and the
// store must open again.
func TestReopenPartialTileKeepsMidHashes(t *testing.T) {
	t.Parallel()
	k := newIndepKeys(t)
	dir := t.TempDir()
	ctx := context.Background()
	tl := &tlogLog{}
	ids := map[uint64]string{}
	want := func(i uint64) (ledger.Entry, string) { return indepEntry(int(i)), ids[i] }
	for _, stop := range []uint64{16, 17, 18} {
		st, err := ledger.Open(dir, k.Signer, k.Verifier)
		if err != nil {
			t.Fatalf("reopen before growing to %d: %v", stop, err)
		}
		l, err := st.CreateLog("a")
		if err != nil {
			t.Fatal(err)
		}
		for size := l.Size(); size < stop; size++ {
			res, err := l.Append(ctx, []ledger.Entry{indepEntry(int(size))})
			if err != nil {
				t.Fatal(err)
			}
			ids[size] = res.Entries[0].ID
		}
		readLeaves(t, l, tl, stop, want)
		committed := st.Logs()[0].Root
		if want := merkle.Hash(tl.root(t, stop)); committed != want {
			t.Errorf("size %d: committed root %s, tlog %s", stop, committed, want)
		}
		got, err := l.RootAt(stop)
		if err != nil {
			t.Fatal(err)
		}
		if got != committed {
			t.Errorf("size %d: root from the stored tiles %s, committed root %s", stop, got, committed)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIndependentLarge appends enough entries for a third tile level
// (65,536 leaves) from concurrent producers, then checks random and
// boundary proofs against tlog.
func TestIndependentLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 70,000 entries; skipped with -short")
	}
	const total = 70_000
	k := newIndepKeys(t)
	st := openIndep(t, t.TempDir(), k, ledger.WithCheckpointInterval(5*time.Millisecond))
	l, err := st.CreateLog("big")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Entries are numbered by producer; their order in the log is whatever
	// the group commits made of it, read back by id.
	sizes := indepSizes(total, []int{1, 2, 7, 50, 255, 256, 257, 1000, 3, 4096, 999})
	var (
		mu    sync.Mutex
		byID  = map[string]int{}
		wg    sync.WaitGroup
		errs  = make(chan error, 4)
		reqs  = make(chan [2]int)
		start int
	)
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range reqs {
				es := make([]ledger.Entry, r[1])
				for j := range es {
					es[j] = indepEntry(r[0] + j)
				}
				res, err := l.Append(ctx, es)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for j, a := range res.Entries {
					byID[a.ID] = r[0] + j
				}
				mu.Unlock()
			}
		}()
	}
	for _, n := range sizes {
		select {
		case reqs <- [2]int{start, n}:
		case err := <-errs:
			t.Fatal(err)
		}
		start += n
	}
	close(reqs)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if l.Size() != total || len(byID) != total {
		t.Fatalf("log size %d with %d distinct ids, want %d", l.Size(), len(byID), total)
	}
	if _, err := l.WaitCheckpoint(ctx, total); err != nil {
		t.Fatal(err)
	}
	tl := &tlogLog{}
	readLeaves(t, l, tl, total, func(i uint64) (ledger.Entry, string) {
		rec, err := l.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := byID[rec.Leaf.ID]
		if !ok {
			t.Fatalf("entry %d has id %q, which no producer got back", i, rec.Leaf.ID)
		}
		return indepEntry(n), rec.Leaf.ID
	})

	seed := uint64(time.Now().UnixNano())
	t.Logf("random pairs from seed %d", seed)
	rnd := mrand.New(mrand.NewPCG(seed, 0))
	for range 2000 {
		size := 1 + rnd.Uint64N(total)
		checkInclusion(t, l, tl, rnd.Uint64N(size), size)
		to := 1 + rnd.Uint64N(total)
		checkConsistency(t, l, tl, 1+rnd.Uint64N(to), to)
	}
	bounds := []uint64{1, 2, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 65535, 65536, 65537, total - 1, total}
	for i, size := range bounds {
		checkRoot(t, l, tl, size)
		for _, idx := range []uint64{0, 1, 255, 256, 4095, 4096, 65535, 65536, size / 2, size - 2, size - 1} {
			if idx < size {
				checkInclusion(t, l, tl, idx, size)
			}
		}
		for _, from := range bounds[:i+1] {
			checkConsistency(t, l, tl, from, size)
		}
	}
	checkTiles(t, l, tl, total)
	if _, err := l.Tile(2, 0, 1); err != nil {
		t.Errorf("no tile at tile level 2: %v", err)
	}
	cps := checkCheckpoints(t, l, tl, k.Verifier)
	t.Logf("%d checkpoints verified", len(cps))
}

// scrubClean runs auditd's scrub and checkpoint audit (package checkers) on
// the store, which the checks above found right with tlog: they must find
// nothing, and the scrub must read every entry.
func scrubClean(t testing.TB, st *ledger.Store, v note.Verifier, entries int) {
	t.Helper()
	p := &scrubProgress{}
	src := checkers.StoreSource(st)
	for _, c := range []checkers.Checker{checkers.NewScrub(src, v), checkers.NewCheckpointAudit(src, v)} {
		if err := c.Run(context.Background(), p); err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
	}
	for _, f := range p.findings {
		t.Errorf("scrub: %v", f)
	}
	if p.entries != entries {
		t.Errorf("scrub checked %d entries, want %d", p.entries, entries)
	}
}

type scrubProgress struct {
	mu       sync.Mutex
	findings []checkers.Finding
	entries  int
}

func (p *scrubProgress) Checked(ctx context.Context, n int) error {
	p.mu.Lock()
	p.entries += n
	p.mu.Unlock()
	return ctx.Err()
}

func (p *scrubProgress) Found(f checkers.Finding) {
	p.mu.Lock()
	p.findings = append(p.findings, f)
	p.mu.Unlock()
}

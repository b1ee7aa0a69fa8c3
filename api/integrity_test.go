package api_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// The tests of this file damage a ledger behind the server's back: the
// store is closed, its directory copied, the copy opened with Pebble
// directly and one key edited (key layout: ledger/keys.go), then the copy
// served again through a real HTTP server. Each fault gets its own copy.

// faultLedger is a filled, closed ledger directory with its key.
type faultLedger struct {
	dir  string
	key  ledgertest.Key
	vkey string
	id   uint32 // the id of log "c"
	size int
	// leaves are the events' leaf hashes, computed here from the events
	// posted (not read back), and anchored on the signed checkpoint: their
	// tree hash is its root.
	leaves []merkle.Hash
}

// faultEvent is event i of a fault ledger as posted: a retry of it is the
// same event.
func faultEvent(i int) string {
	return fmt.Sprintf(`{"id":"ev-%06d","key":"k%d","time":"2024-05-01T10:00:00Z","payload":{"n":%d}}`, i, i%7, i)
}

func faultID(i int) string { return fmt.Sprintf("ev-%06d", i) }

// faultLeaf is the leaf hash of faultEvent(i), computed independently.
func faultLeaf(t *testing.T, i int) merkle.Hash {
	key := fmt.Sprintf("k%d", i%7)
	return leafHashOf(t, "c", faultID(i), &key, time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), []byte(fmt.Sprintf(`{"n":%d}`, i)))
}

// integrityRecord records what the store's integrity handler was told.
type integrityRecord struct {
	mu   sync.Mutex
	seen []ledger.IntegrityError
}

func (r *integrityRecord) handle(e *ledger.IntegrityError) {
	r.mu.Lock()
	r.seen = append(r.seen, *e)
	r.mu.Unlock()
}

func (r *integrityRecord) all() []ledger.IntegrityError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ledger.IntegrityError(nil), r.seen...)
}

func (r *integrityRecord) count(kind string, index int64) int {
	n := 0
	for _, e := range r.all() {
		if e.Kind == kind && e.Index == index {
			n++
		}
	}
	return n
}

// serveLedger opens the ledger in dir with an integrity handler and serves
// it on loopback, with /metrics. stop closes both (also at the test's end).
func (f *faultLedger) serveLedger(t *testing.T, dir string) (env *testEnv, rec *integrityRecord, stop func()) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	rec = &integrityRecord{}
	store := ledgertest.Open(t, ledgertest.WithDir(dir), ledgertest.WithKey(f.key), ledgertest.WithLedger(
		ledger.WithCheckpointInterval(10*time.Millisecond), ledger.WithIntegrityHandler(rec.handle)))
	env = &testEnv{t: t, store: store, verifier: f.key.Verifier, vkey: f.vkey, reg: prometheus.NewRegistry()}
	env.server = api.New(store, f.vkey, api.Options{Limits: api.Limits{MaxEvents: 20_000}, Components: api.Components{Metrics: promhttp.HandlerFor(env.reg, promhttp.HandlerOpts{})}, Logger: quiet})
	r := prometheus.WrapRegistererWithPrefix("auditd_", env.reg)
	for _, c := range store.Collectors() {
		r.MustRegister(c)
	}
	env.http = httptest.NewServer(env.server)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			env.http.Close()
			if err := store.Close(); err != nil {
				t.Errorf("close store: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return env, rec, stop
}

// newFaultLedger posts n events to log "c" (in requests of per) and closes
// the ledger.
func newFaultLedger(t *testing.T, n, per int) *faultLedger {
	t.Helper()
	k := ledgertest.NewKey(t, testKeyName)
	f := &faultLedger{dir: t.TempDir(), vkey: k.VKey, key: k, size: n}
	env, _, stop := f.serveLedger(t, f.dir)
	if _, err := env.store.CreateLog("c"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += per {
		var b strings.Builder
		for j := i; j < min(n, i+per); j++ {
			b.WriteString(faultEvent(j))
			b.WriteByte('\n')
		}
		q := ""
		if i+per >= n {
			q = "wait=checkpoint"
		}
		res, _ := env.post("c", q, b.String())
		if q != "" {
			cp := openCheckpoint(t, env, "c", res.Checkpoint)
			for j := 0; j < n; j++ {
				f.leaves = append(f.leaves, faultLeaf(t, j))
			}
			if cp.Size != uint64(n) || rfc6962Root(f.leaves) != cp.Root {
				t.Fatalf("the posted events do not hash to the signed checkpoint (size %d)", cp.Size)
			}
		}
	}
	stop()
	db := openPebble(t, f.dir)
	v, closer, err := db.Get(append([]byte{'n'}, "c"...))
	if err != nil {
		t.Fatal(err)
	}
	f.id = binary.BigEndian.Uint32(v)
	closer.Close()
	db.Close()
	return f
}

func openPebble(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatalf("pebble open %s: %v", dir, err)
	}
	return db
}

// withFault copies the ledger, edits the copy through Pebble and serves it.
func (f *faultLedger) withFault(t *testing.T, edit func(*pebble.DB) error) (*testEnv, *integrityRecord) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "copy")
	copyTree(t, f.dir, dir)
	if edit != nil {
		db := openPebble(t, dir)
		if err := edit(db); err != nil {
			t.Fatalf("edit: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	env, rec, _ := f.serveLedger(t, dir)
	return env, rec
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", from, err)
	}
}

// Keys (ledger/keys.go): 'e' log(u32) index(u64); 't' log(u32) level(u8) n(u64).
func entryKey(log uint32, i uint64) []byte {
	k := binary.BigEndian.AppendUint32([]byte{'e'}, log)
	return binary.BigEndian.AppendUint64(k, i)
}

func tileKey(log uint32, level uint8, n uint64) []byte {
	k := append(binary.BigEndian.AppendUint32([]byte{'t'}, log), level)
	return binary.BigEndian.AppendUint64(k, n)
}

func deleteKey(k []byte) func(*pebble.DB) error {
	return func(db *pebble.DB) error { return db.Delete(k, pebble.Sync) }
}

// flipBit flips the low bit of byte at of k's value (at < 0 counts from
// the end).
func flipBit(k []byte, at int) func(*pebble.DB) error {
	return func(db *pebble.DB) error {
		v, closer, err := db.Get(k)
		if err != nil {
			return err
		}
		v = append([]byte(nil), v...)
		closer.Close()
		if at < 0 {
			at += len(v)
		}
		v[at] ^= 1
		return db.Set(k, v, pebble.Sync)
	}
}

// wantIntegrityResponse requires a 500 with code integrity, kind and index
// (index < 0: none).
func wantIntegrityResponse(t *testing.T, what string, r response, kind string, index int64) {
	t.Helper()
	var body struct {
		Code  string `json:"code"`
		Kind  string `json:"kind"`
		Index *int64 `json:"index"`
	}
	if r.status != http.StatusInternalServerError || json.Unmarshal(r.body, &body) != nil || body.Code != "integrity" || body.Kind != kind ||
		(index >= 0) != (body.Index != nil) || (body.Index != nil && *body.Index != index) {
		t.Errorf("%s: got %v, want 500 integrity %s at %d", what, r, kind, index)
	}
}

// violationsMetric reads auditd_ledger_integrity_violations_total for log c
// and kind from /metrics.
func violationsMetric(t *testing.T, env *testEnv, kind string) string {
	t.Helper()
	body := string(env.get("/metrics", http.StatusOK).body)
	prefix := `auditd_ledger_integrity_violations_total{kind="` + kind + `",log="c"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return "0"
}

// TestIntegrityAPIEntryMissing is the regression of issue 8, defect 3,
// through HTTP: an entry deleted from a chunk whose id index is ingested
// (64Ki entries) made every read of it, and a producer's retry, answer 500
// "internal" forever, with no alert. Each answers 500 "integrity" now,
// counted and handed to the handler, and the other entries still read fine.
func TestIntegrityAPIEntryMissing(t *testing.T) {
	t.Parallel()
	n := 65_536 + 300
	f := newFaultLedger(t, n, 20_000)
	const lost = 1000
	env, rec := f.withFault(t, deleteKey(entryKey(f.id, lost)))
	env.get("/readyz", http.StatusOK)
	reads := []string{
		"/v1/logs/c/entries/1000",
		"/v1/logs/c/entries?id=" + faultID(lost),
		"/v1/logs/c/entries?start=990&end=1010",
		"/v1/logs/c/proof/inclusion?id=" + faultID(lost),
	}
	for _, p := range reads {
		wantIntegrityResponse(t, "GET "+p, env.do(http.MethodGet, p, nil), "entry_missing", lost)
	}
	r := env.do(http.MethodPost, "/v1/logs/c/entries", strings.NewReader(faultEvent(lost)+"\n"))
	wantIntegrityResponse(t, "POST a retry of the event", r, "entry_missing", lost)
	if got := rec.count("entry_missing", lost); got != 5 {
		t.Errorf("the handler was told %d times of entry %d, want 5: %v", got, lost, rec.all())
	}
	if got := violationsMetric(t, env, "entry_missing"); got != "5" {
		t.Errorf("violations metric %q, want 5", got)
	}
	// Everything else answers.
	var cp merkle.Checkpoint
	for _, i := range []int{0, lost - 1, lost + 1, 65_535, 65_536, n - 1} {
		var e entryJSON
		env.getJSON(fmt.Sprintf("/v1/logs/c/entries/%d", i), &e)
		if e.ID != faultID(i) {
			t.Errorf("entry %d: id %q", i, e.ID)
		}
		recomputeLeaf(t, "c", e)
		env.getJSON("/v1/logs/c/entries?id="+faultID(i), nil)
		var p inclusionJSON
		env.getJSON("/v1/logs/c/proof/inclusion?id="+faultID(i), &p)
		cp = openCheckpoint(t, env, "c", p.Checkpoint)
		if p.LeafHash != e.LeafHash {
			t.Errorf("entry %d: proof leaf %s, entry leaf %s", i, p.LeafHash, e.LeafHash)
		}
		verifyInclusion(t, uint64(i), cp.Size, p.LeafHash, p.Hashes, cp.Root)
	}
	out, _ := env.post("c", "wait=checkpoint", faultEvent(lost+1)+"\n")
	if !out.Entries[0].Duplicate || out.Entries[0].Index != lost+1 {
		t.Errorf("retry of entry %d: %+v", lost+1, out.Entries[0])
	}
	cp = openCheckpoint(t, env, "c", out.Checkpoint)
	verifyInclusion(t, lost+1, cp.Size, out.Entries[0].LeafHash, out.Entries[0].InclusionProof, cp.Root)
	if cp.Size != uint64(n) {
		t.Errorf("size %d after the retries, want %d", cp.Size, n)
	}
}

type inclusionJSON struct {
	Index      uint64        `json:"index"`
	Size       uint64        `json:"size"`
	LeafHash   merkle.Hash   `json:"leaf_hash"`
	Hashes     []merkle.Hash `json:"hashes"`
	Checkpoint string        `json:"checkpoint"`
}

// TestIntegrityAPIStoredData is the regression of issue 8, defect 4,
// through HTTP: a flipped payload byte was served with 200 and a leaf hash
// that differs from the tree's, and a flipped tile hash gave wrong proofs
// with 200.
func TestIntegrityAPIStoredData(t *testing.T) {
	t.Parallel()
	const n = 1100
	f := newFaultLedger(t, n, 500)

	t.Run("payload flipped", func(t *testing.T) {
		const i = 300
		env, rec := f.withFault(t, flipBit(entryKey(f.id, i), -2))
		wantIntegrityResponse(t, "GET entry", env.do(http.MethodGet, "/v1/logs/c/entries/300", nil), "leaf_mismatch", i)
		wantIntegrityResponse(t, "GET entry by id", env.do(http.MethodGet, "/v1/logs/c/entries?id="+faultID(i), nil), "leaf_mismatch", i)
		wantIntegrityResponse(t, "GET entries", env.do(http.MethodGet, "/v1/logs/c/entries?start=0&end=1100", nil), "leaf_mismatch", i)
		wantIntegrityResponse(t, "POST retry", env.do(http.MethodPost, "/v1/logs/c/entries", strings.NewReader(faultEvent(i))), "leaf_mismatch", i)
		if rec.count("leaf_mismatch", i) < 4 || violationsMetric(t, env, "leaf_mismatch") == "0" {
			t.Errorf("handler %v, metric %s", rec.all(), violationsMetric(t, env, "leaf_mismatch"))
		}
		env.getJSON("/v1/logs/c/entries/299", nil)
		env.getJSON("/v1/logs/c/entries?start=0&end=300", nil)
	})

	t.Run("leaf hash flipped in a full tile", func(t *testing.T) {
		const i = 512 + 7 // tile 0/2, full
		env, _ := f.withFault(t, flipBit(tileKey(f.id, 0, 2), 7*merkle.HashSize))
		wantIntegrityResponse(t, "GET entry", env.do(http.MethodGet, "/v1/logs/c/entries/519", nil), "leaf_mismatch", i)
		wantIntegrityResponse(t, "GET proof by index", env.do(http.MethodGet, "/v1/logs/c/proof/inclusion?index=519", nil), "root_mismatch", i)
		wantIntegrityResponse(t, "GET proof by id", env.do(http.MethodGet, "/v1/logs/c/proof/inclusion?id="+faultID(i), nil), "leaf_mismatch", i)
		// A neighbour's retry with wait=checkpoint: its proof uses the
		// flipped hash.
		r := env.do(http.MethodPost, "/v1/logs/c/entries?wait=checkpoint", strings.NewReader(faultEvent(i-1)))
		wantIntegrityResponse(t, "POST retry of a neighbour", r, "root_mismatch", i-1)
		checkEveryProof(t, f, env, 512, 768)
	})

	t.Run("level-4 hash flipped in a neighbour's tile", func(t *testing.T) {
		// Tile 0/1's mid hash 3 covers leaves [304, 320); the proofs of the
		// other leaves of the tile use it, their entries are intact.
		env, _ := f.withFault(t, flipBit(tileKey(f.id, 0, 1), (256+3)*merkle.HashSize+5))
		failed := checkEveryProof(t, f, env, 256, 512)
		if failed == 0 {
			t.Error("no proof failed: the flip was not on any path")
		}
		for i := 256; i < 512; i += 17 {
			env.getJSON(fmt.Sprintf("/v1/logs/c/entries/%d", i), nil)
		}
	})
}

// checkEveryProof asks for the inclusion proof of every leaf in [from, to)
// at the signed checkpoint, by index and with a size: each must be 200 and
// correct (checked with golang.org/x/mod/sumdb/tlog against the signed
// checkpoint, or at another size against the tree hash of the posted
// events, which are anchored on it) or 500 integrity, never a wrong proof.
// It returns how many were refused.
func checkEveryProof(t *testing.T, f *faultLedger, env *testEnv, from, to int) (failed int) {
	t.Helper()
	signed := env.get("/v1/logs/c/checkpoint", http.StatusOK).body
	cp := openCheckpoint(t, env, "c", string(signed))
	for i := from; i < to; i++ {
		for _, q := range []string{fmt.Sprintf("index=%d", i), fmt.Sprintf("index=%d&size=%d", i, cp.Size), fmt.Sprintf("index=%d&size=%d", i, to)} {
			r := env.do(http.MethodGet, "/v1/logs/c/proof/inclusion?"+q, nil)
			if r.status != http.StatusOK {
				var body struct{ Code string }
				if r.status != http.StatusInternalServerError || json.Unmarshal(r.body, &body) != nil || body.Code != "integrity" {
					t.Errorf("proof %s: %v", q, r)
				}
				failed++
				continue
			}
			var p inclusionJSON
			err := json.Unmarshal(r.body, &p)
			if err != nil {
				t.Fatal(err)
			}
			root := tlog.Hash(cp.Root)
			if p.Size != cp.Size {
				tr := newTlogTree(t, f.leaves[:p.Size])
				if root, err = tlog.TreeHash(int64(p.Size), tr.reader()); err != nil {
					t.Fatal(err)
				}
			}
			if err := tlog.CheckRecord(toTlog(p.Hashes), int64(p.Size), root, int64(i), tlog.Hash(p.LeafHash)); err != nil {
				t.Errorf("proof %s answered 200 and is wrong: %v", q, err)
			}
		}
	}
	return failed
}

// TestIntegrityAPICleanStore reads a sound ledger every way and requires
// 200s, correct proofs and no alarm.
func TestIntegrityAPICleanStore(t *testing.T) {
	t.Parallel()
	const n = 2100
	f := newFaultLedger(t, n, 700)
	env, rec := f.withFault(t, nil)
	var out struct {
		Entries []entryJSON `json:"entries"`
	}
	for _, r := range [][2]int{{0, n}, {255, 257}, {1023, 1025}, {1000, 2049}} {
		env.getJSON(fmt.Sprintf("/v1/logs/c/entries?start=%d&end=%d", r[0], r[1]), &out)
		if len(out.Entries) != r[1]-r[0] || out.Entries[0].Index != uint64(r[0]) {
			t.Fatalf("entries [%d, %d): %d of them", r[0], r[1], len(out.Entries))
		}
		for _, e := range out.Entries {
			recomputeLeaf(t, "c", e)
			if e.LeafHash != f.leaves[e.Index] {
				t.Fatalf("entry %d: leaf hash %s, the event's is %s", e.Index, e.LeafHash, f.leaves[e.Index])
			}
		}
	}
	for _, i := range []int{0, 255, 256, 1023, 1024, n - 1} {
		env.getJSON(fmt.Sprintf("/v1/logs/c/entries/%d", i), nil)
		env.getJSON("/v1/logs/c/entries?id="+faultID(i), nil)
	}
	if failed := checkEveryProof(t, f, env, 1020, 1030); failed != 0 {
		t.Errorf("%d proofs refused on a sound ledger", failed)
	}
	res, _ := env.post("c", "wait=checkpoint", faultEvent(5)+"\n"+faultEvent(n)+"\n")
	cp := openCheckpoint(t, env, "c", res.Checkpoint)
	for _, e := range res.Entries {
		verifyInclusion(t, e.Index, cp.Size, e.LeafHash, e.InclusionProof, cp.Root)
	}
	if got := rec.all(); len(got) != 0 {
		t.Errorf("false alarms: %v", got)
	}
	// Each log's violation counters exist from its opening (at 0, so that
	// increase() sees a first violation), and none has counted anything.
	series := 0
	for _, line := range strings.Split(string(env.get("/metrics", http.StatusOK).body), "\n") {
		if strings.HasPrefix(line, "auditd_ledger_integrity_violations_total{") {
			series++
			if !strings.HasSuffix(line, " 0") {
				t.Errorf("violations counted on a sound ledger: %s", line)
			}
		}
	}
	if series == 0 {
		t.Errorf("no violation counter series at 0 for the log")
	}
}

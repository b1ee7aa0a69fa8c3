package ledger

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// testKeyName is the signer name of test stores; a log's origin is
// testKeyName + "/" + log.
const testKeyName = "ledger-test.example"

// testStoreConfig is what reopen needs to open a store again.
type testStoreConfig struct {
	dir      string
	signer   note.Signer
	verifier note.Verifier
	opts     []Option
}

var (
	testStoresMu sync.Mutex
	testStores   = map[*Store]testStoreConfig{}
)

// newTestStore opens a store in a fresh temporary directory with a new
// Ed25519 key. The store is closed when the test ends.
func newTestStore(t testing.TB, opts ...Option) (*Store, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, testKeyName)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	// Quiet by default; a test's own WithLogger comes later and wins.
	opts = append([]Option{WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	cfg := testStoreConfig{dir: t.TempDir(), signer: signer, verifier: verifier, opts: opts}
	return openTestStore(t, cfg), verifier
}

func openTestStore(t testing.TB, cfg testStoreConfig) *Store {
	t.Helper()
	s, err := Open(cfg.dir, cfg.signer, cfg.verifier, cfg.opts...)
	if err != nil {
		t.Fatalf("open store in %s: %v", cfg.dir, err)
	}
	testStoresMu.Lock()
	testStores[s] = cfg
	testStoresMu.Unlock()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		testStoresMu.Lock()
		delete(testStores, s)
		testStoresMu.Unlock()
	})
	return s
}

// testConfig returns the directory, key and options s was opened with.
// Parallel tests open stores at the same time, so every read of testStores
// goes through here, under its lock.
func testConfig(t testing.TB, s *Store) testStoreConfig {
	t.Helper()
	testStoresMu.Lock()
	cfg, ok := testStores[s]
	testStoresMu.Unlock()
	if !ok {
		t.Fatal("store was not opened by newTestStore")
	}
	return cfg
}

// reopen closes s and opens the same directory again with the same key and
// options.
func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	cfg := testConfig(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
	return openTestStore(t, cfg)
}

func mustCreateLog(t testing.TB, s *Store, name string) *Log {
	t.Helper()
	l, err := s.CreateLog(name)
	if err != nil {
		t.Fatalf("CreateLog(%q): %v", name, err)
	}
	return l
}

func mustLog(t testing.TB, s *Store, name string) *Log {
	t.Helper()
	l, err := s.Log(name)
	if err != nil {
		t.Fatalf("Log(%q): %v", name, err)
	}
	return l
}

// testCtx returns a context that ends after d or with the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t testing.TB, l *Log, es ...Entry) *AppendResult {
	t.Helper()
	res, err := l.Append(testCtx(t, 30*time.Second), es)
	if err != nil {
		t.Fatalf("Append to %s: %v", l.Name(), err)
	}
	if len(res.Entries) != len(es) {
		t.Fatalf("Append to %s: %d results for %d entries", l.Name(), len(res.Entries), len(es))
	}
	return res
}

func mustRootAt(t testing.TB, l *Log, size uint64) merkle.Hash {
	t.Helper()
	r, err := l.RootAt(size)
	if err != nil {
		t.Fatalf("%s: RootAt(%d): %v", l.Name(), size, err)
	}
	return r
}

func mustEntry(t testing.TB, l *Log, i uint64) *Record {
	t.Helper()
	r, err := l.Entry(i)
	if err != nil {
		t.Fatalf("%s: Entry(%d): %v", l.Name(), i, err)
	}
	return r
}

// rootOf computes the RFC 6962 root over leaf hashes in memory, independently
// of the log's tiles.
func rootOf(t testing.TB, leaves []merkle.Hash) merkle.Hash {
	t.Helper()
	if len(leaves) == 0 {
		return merkle.EmptyRoot()
	}
	rng := merkle.NewRange()
	for _, h := range leaves {
		if err := rng.Append(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := rng.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// verifyInclusionAll checks the inclusion proof of every leaf of the tree of
// the given size against root, with leaves[i] the expected leaf hash of i.
func verifyInclusionAll(t testing.TB, l *Log, size uint64, leaves []merkle.Hash, root merkle.Hash) {
	t.Helper()
	bad := 0
	for i := uint64(0); i < size; i++ {
		p, err := l.InclusionProof(i, size)
		if err != nil {
			t.Fatalf("%s: InclusionProof(%d, %d): %v", l.Name(), i, size, err)
		}
		if err := merkle.VerifyInclusion(i, size, leaves[i], p, root); err != nil {
			if bad < 5 {
				t.Errorf("%s: inclusion proof of %d in %d does not verify: %v", l.Name(), i, size, err)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d inclusion proofs in tree %d do not verify", l.Name(), bad, size, size)
	}
}

// metricValue returns the sum of the values of the named counter or gauge
// over the series whose labels include the given name/value pairs.
func metricValue(t testing.TB, s *Store, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range s.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register collector: %v", err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		found = true
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	if !found {
		// A vector with no series yet gathers no family at all.
		for _, c := range s.Collectors() {
			ch := make(chan *prometheus.Desc, 64)
			c.Describe(ch)
			close(ch)
			for d := range ch {
				if strings.Contains(d.String(), `"`+name+`"`) {
					found = true
				}
			}
		}
		if !found {
			t.Fatalf("no metric named %s among the store's collectors", name)
		}
	}
	return sum
}

// stepClock is a settable clock for WithClock.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

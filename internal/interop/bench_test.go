package interop_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// benchBundleEntries is the size of the log BenchmarkEntryBundles reads.
const benchBundleEntries = 2_000_000

var bench struct {
	once  sync.Once
	err   error
	store *ledger.Store
	http  *httptest.Server
	dir   string
	temp  bool
}

// benchLog opens (building it the first time) a log of
// benchBundleEntries entries, in $AUDITD_BENCH_BUNDLES_DIR if set (kept for
// the next run, with its signing key) or in a temporary directory removed
// when the tests end, and serves it over loopback.
func benchLog() error {
	bench.once.Do(func() { bench.err = openBenchLog() })
	return bench.err
}

func openBenchLog() error {
	dir := os.Getenv("AUDITD_BENCH_BUNDLES_DIR")
	if dir == "" {
		d, err := os.MkdirTemp("", "auditd-bundles-bench-")
		if err != nil {
			return err
		}
		dir, bench.temp = d, true
	}
	bench.dir = dir
	signer, verifier, vkey, err := benchKey(filepath.Join(dir, "bench.key"))
	if err != nil {
		return err
	}
	st, err := ledger.Open(filepath.Join(dir, "ledger"), signer, verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	bench.store = st
	l, err := st.CreateLog("interop")
	if err != nil {
		return err
	}
	ctx := context.Background()
	const batch = 4096
	for from := int(l.Size()); from < benchBundleEntries; from += batch {
		es := make([]ledger.Entry, 0, batch)
		for i := from; i < min(from+batch, benchBundleEntries); i++ {
			es = append(es, entryAt(i))
		}
		if _, err := l.Append(ctx, es); err != nil {
			return err
		}
	}
	if _, err := l.WaitCheckpoint(ctx, benchBundleEntries); err != nil {
		return err
	}
	if err := st.Compact(); err != nil {
		return err
	}
	bench.http = httptest.NewServer(api.New(st, vkey, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	return nil
}

// benchKey reads the signing key in file (and its verifier in file.pub),
// making them the first time.
func benchKey(file string) (note.Signer, note.Verifier, string, error) {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		skey, vkey, err := note.GenerateKey(rand.Reader, "bench.example")
		if err != nil {
			return nil, nil, "", err
		}
		if err := errors.Join(os.WriteFile(file, []byte(skey), 0o600), os.WriteFile(file+".pub", []byte(vkey), 0o600)); err != nil {
			return nil, nil, "", err
		}
	}
	skey, err1 := os.ReadFile(file)
	vkey, err2 := os.ReadFile(file + ".pub")
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, "", err
	}
	signer, err := note.NewSigner(string(skey))
	if err != nil {
		return nil, nil, "", err
	}
	verifier, err := note.NewVerifier(string(vkey))
	return signer, verifier, string(vkey), err
}

// closeBench closes what benchLog opened.
func closeBench() {
	if bench.http != nil {
		bench.http.Close()
	}
	if bench.store != nil {
		bench.store.Close()
	}
	if bench.temp {
		os.RemoveAll(bench.dir)
	}
}

// BenchmarkEntryBundles GETs full entry bundles of a 2M-entry log over
// loopback HTTP, from GOMAXPROCS clients walking the log from different
// places; one op is one bundle of 256 entries, recomputed from the stored
// entries and checked against the tree before it is served.
func BenchmarkEntryBundles(b *testing.B) {
	if err := benchLog(); err != nil {
		b.Fatal(err)
	}
	base := bench.http.URL + "/v1/logs/interop/tile/entries/"
	const bundles = benchBundleEntries / merkle.TileWidth
	var next atomic.Uint64
	var bytes atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := (next.Add(7919) - 7919) % bundles
			res, err := client.Get(base + tilePath(n))
			if err != nil {
				b.Error(err)
				return
			}
			m, err := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK {
				b.Errorf("bundle %d: %d %v", n, res.StatusCode, err)
				return
			}
			bytes.Add(m)
		}
	})
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "bundles/s")
	b.ReportMetric(float64(b.N)*merkle.TileWidth/el, "entries/s")
	b.ReportMetric(float64(bytes.Load())/float64(b.N), "bytes/bundle")
}

// tilePath writes a tile index as C2SP path elements.
func tilePath(n uint64) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n >= 1000 {
		n /= 1000
		s = fmt.Sprintf("x%03d/", n%1000) + s
	}
	return s
}

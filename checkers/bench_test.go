package checkers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// BenchmarkScrub scrubs a log of 1,000,000 entries with 256-byte payloads
// from a warm store (one pass first to warm the caches), reporting
// entries/s. Building the store takes a while; with AUDITD_SCRUB_BENCH_DIR
// set it is built there once and reused.
func BenchmarkScrub(b *testing.B) {
	const total = 1_000_000
	dir := os.Getenv("AUDITD_SCRUB_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	k := benchKey(b, dir)
	st, err := ledger.Open(dir, k.signer, k.verifier, quiet(), ledger.WithCacheSize(1<<30))
	if err != nil {
		b.Fatal(err)
	}
	l, err := st.CreateLog("pay")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const batch = 10_000
	for next := int(l.Size()); next < total; next += batch {
		es := make([]ledger.Entry, batch)
		for j := range es {
			p := make([]byte, 256)
			rand.Read(p)
			es[j] = ledger.Entry{ID: fmt.Sprintf("ev-%d", next+j), Payload: p}
		}
		if _, err := l.Append(ctx, es); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := l.WaitCheckpoint(ctx, total); err != nil {
		b.Fatal(err)
	}
	if err := st.Compact(); err != nil {
		b.Fatal(err)
	}
	src := checkers.StoreSource(st)
	scrub := checkers.NewScrub(src, k.verifier)
	run := func() {
		c := &collector{}
		if err := scrub.Run(ctx, c); err != nil {
			b.Fatal(err)
		}
		if len(c.findings) != 0 || c.entries != total {
			b.Fatalf("%d entries, findings %v", c.entries, c.findings)
		}
	}
	run() // warm
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		run()
	}
	b.ReportMetric(float64(total*b.N)/time.Since(start).Seconds(), "entries/s")
	// CPU time per entry, which a loaded machine does not change much:
	// 2 cores / this is the rate on an idle 2-core machine if the pass
	// kept both busy.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(total*b.N), "cpu-ns/entry")
	b.StopTimer()
	st.Close()
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchKey reads the key kept in dir, or makes one and keeps it there.
func benchKey(b *testing.B, dir string) testKey {
	path := filepath.Join(dir, "bench.key")
	if raw, err := os.ReadFile(path); err == nil {
		skey, vkey, _ := strings.Cut(string(raw), "\n")
		s, err1 := note.NewSigner(skey)
		v, err2 := note.NewVerifier(vkey)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
		return testKey{s, v, vkey}
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "bench.example")
	if err != nil {
		b.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(path, []byte(skey+"\n"+vkey), 0o600); err != nil {
		b.Fatal(err)
	}
	return benchKey(b, dir)
}

package checkers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// BenchmarkScrub scrubs a log of 1,000,000 entries with 256-byte payloads
// from a warm store (one pass first to warm the caches), reporting
// entries/s. The store is built once, which takes a while.
func BenchmarkScrub(b *testing.B) {
	const total = 1_000_000
	k := newKey(b)
	dir := b.TempDir()
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
	for next := 0; next < total; next += batch {
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
	start := time.Now()
	for range b.N {
		run()
	}
	b.ReportMetric(float64(total*b.N)/time.Since(start).Seconds(), "entries/s")
	b.StopTimer()
	st.Close()
}

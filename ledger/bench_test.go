package ledger

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

func benchStore(b *testing.B, opts ...Option) *Store {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "bench.example")
	s, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	st, err := Open(b.TempDir(), s, v, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// uuidLike returns a 36-character event id, as the storage target assumes.
func uuidLike(n uint64) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(n*2654435761), uint16(n>>7), n&0xfff, (n>>3)&0xfff, n*0x9E3779B97F4A7C15&0xffffffffffff)
}

// BenchmarkAppend measures durable in-process appends: 256-byte payloads,
// 36-character ids, requests of 1,000 entries from 4 concurrent producers.
func BenchmarkAppend(b *testing.B) {
	st := benchStore(b)
	l, err := st.CreateLog("bench")
	if err != nil {
		b.Fatal(err)
	}
	const per = 1000
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	reqs := (b.N + per - 1) / per
	var next uint64
	var mu sync.Mutex
	b.SetBytes(256 * per)
	b.ResetTimer()
	defer cpuMeter(b)()
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			es := make([]Entry, per)
			for {
				mu.Lock()
				if next >= uint64(reqs) {
					mu.Unlock()
					return
				}
				r := next
				next++
				mu.Unlock()
				for i := range es {
					es[i] = Entry{ID: uuidLike(r*per + uint64(i)), Payload: payload, PayloadJSON: true}
				}
				if _, err := l.Append(context.Background(), es); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(reqs*per)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkLeafInclusion measures proof construction (tile reads and
// hashing) for random leaves of a 1M-entry log, the work behind GET
// /proof/inclusion.
func BenchmarkLeafInclusion(b *testing.B) {
	st := benchStore(b)
	l, err := st.CreateLog("proofs")
	if err != nil {
		b.Fatal(err)
	}
	const n, per = 1 << 20, 4096
	es := make([]Entry, per)
	for r := 0; r < n/per; r++ {
		for i := range es {
			es[i] = Entry{ID: uuidLike(uint64(r*per + i)), Payload: []byte("p")}
		}
		if _, err := l.Append(context.Background(), es); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	defer cpuMeter(b)()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			i = (i*6364136223846793005 + 1442695040888963407) % n
			if _, _, err := l.LeafInclusion(i, n); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

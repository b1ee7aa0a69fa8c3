package interop_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

// BenchmarkCosignatureDelay measures, per checkpoint, the time from the
// ledger publishing a signed checkpoint (WaitCheckpoint returning) to the
// submitter holding a witness's cosignature of it, on loopback: one entry
// appended per iteration, so each iteration is one checkpoint. It reports
// the median and the 99th percentile. The witnesses: auditd's (its state
// synced to Pebble before it answers) and torchwood's litewitness (a
// process: state in SQLite, each cosignature signed by its ssh-agent).
func BenchmarkCosignatureDelay(b *testing.B) {
	b.Run("witness=auditd", func(b *testing.B) {
		benchDelay(b, func(b *testing.B, origin string, k ledgertest.Key) (string, note.Verifier) {
			skey, vkey, _ := witness.GenerateKey(rand.Reader, "auditd.example/witness")
			c, _ := witness.ParseKey(skey)
			bucket, _ := ledgertest.Open(b).Bucket("witness")
			srv, err := server.New(bucket, c, []server.Log{{Origin: origin, Verifier: k.Verifier}}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("/add-checkpoint", srv)
			ts := httptest.NewServer(mux)
			b.Cleanup(ts.Close)
			wv, _ := witness.NewVerifier(vkey)
			return ts.URL, wv
		})
	})
	b.Run("witness=litewitness", func(b *testing.B) {
		benchDelay(b, func(b *testing.B, origin string, k ledgertest.Key) (string, note.Verifier) {
			lw := startLitewitness(b, "torchwood.example/witness")
			lw.addLog(b, origin, k.VKey)
			return lw.url, lw.verifier
		})
	})
}

func benchDelay(b *testing.B, start func(b *testing.B, origin string, k ledgertest.Key) (string, note.Verifier)) {
	store, key := ledgertest.OpenKey(b, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("bench")
	if err != nil {
		b.Fatal(err)
	}
	url, wv := start(b, l.Origin(), key)
	cosigned := make(chan uint64, 1024)
	sub, err := submit.New(func() []submit.Log { return []submit.Log{l} }, []submit.Witness{{URL: url, Verifier: wv}},
		submit.Options{Logger: slog.New(slog.DiscardHandler), OnCosigned: func(_, _ string, size uint64) { cosigned <- size }})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sub.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for size := <-cosigned; size < l.Size(); size = <-cosigned { // the empty log's checkpoint
	}
	delays := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(ctx, []ledger.Entry{{Payload: []byte{byte(i), byte(i >> 8), byte(i >> 16)}}}); err != nil {
			b.Fatal(err)
		}
		cp, err := l.WaitCheckpoint(ctx, l.Size())
		if err != nil {
			b.Fatal(err)
		}
		signed := time.Now()
		for size := <-cosigned; size < cp.Size; size = <-cosigned {
		}
		delays = append(delays, time.Since(signed))
	}
	b.StopTimer()
	slices.Sort(delays)
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-ms")
}

package checkers_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/auditd/auditd/checkers"
)

// BenchmarkKafkaReread measures a full re-read, unthrottled, of a
// partition of 100,000 records (kfake over loopback TCP, Pebble in a temp
// dir): records compared per second, the broker's side included.
//
//	go test -run '^$' -bench KafkaReread -benchtime 3x ./checkers/
func BenchmarkKafkaReread(b *testing.B) {
	const n = 100_000
	e := newKafkaEnv(b)
	e.produce(records(n, -1))
	start := time.Now()
	e.start()
	e.waitNext(n)
	b.Logf("ledgered %d records in %s", n, time.Since(start))
	e.stop()
	c := e.reread(checkers.KafkaRereadOptions{}).FullPass()
	b.ResetTimer()
	for b.Loop() {
		col := &collector{}
		if err := c.Run(context.Background(), col); err != nil || len(col.findings) != 0 || col.entries != n {
			b.Fatalf("Run = %v, %d findings, %d entries", err, len(col.findings), col.entries)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkKafkaIngestWithReread measures the Kafka source's ingestion
// (200,000 records of a second topic, from the broker to durable entries)
// alone and while full re-reads run back to back through a Runner at the
// default throttle, 5,000 records/s, over a partition of 100,000 records
// ledgered before.
//
//	go test -run '^$' -bench KafkaIngestWithReread -benchtime 3x ./checkers/
func BenchmarkKafkaIngestWithReread(b *testing.B) {
	for _, rate := range []float64{0, 5000} {
		name := "alone"
		if rate > 0 {
			name = fmt.Sprintf("reread=%g/s", rate)
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				total += ingestWithReread(b, rate)
				b.StartTimer()
			}
			b.ReportMetric(float64(200_000*b.N)/total.Seconds(), "ingested/s")
		})
	}
}

// ingestWithReread returns how long the source took to ledger 200,000
// records of topic u, with re-reads of t at rate (0: none) meanwhile.
func ingestWithReread(b *testing.B, rate float64) time.Duration {
	e := newKafkaEnv(b)
	e.cfg.Topics = []string{"t", "u"}
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, "u"); err != nil {
		b.Fatal(err)
	}
	e.produce(records(100_000, -1))
	e.start()
	e.waitNext(100_000)
	e.stop()
	u := records(200_000, -1)
	for _, r := range u {
		r.Topic = "u"
	}
	e.produce(u)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if rate > 0 {
		kv, err := e.store.Bucket("checks")
		if err != nil {
			b.Fatal(err)
		}
		r := checkers.NewRunner(kv, checkers.Options{Logger: slog.New(slog.DiscardHandler)})
		full := e.reread(checkers.KafkaRereadOptions{}).FullPass()
		if err := r.Register(full, checkers.Schedule{Rate: rate}); err != nil {
			b.Fatal(err)
		}
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				r.RunNow(ctx, full.Name())
			}
		}()
	} else {
		close(done)
	}
	start := time.Now()
	e.start()
	wait(b, "u.0 ledgered", func() bool {
		l, err := e.store.Log("u.0")
		return err == nil && l.Size() == 200_000
	})
	took := time.Since(start)
	cancel()
	<-done
	e.stop()
	return took
}

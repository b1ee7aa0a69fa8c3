package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDemoProducerSendsEvery checks that the demo's producer delivers all
// of --events before it returns: closing the client without a flush
// dropped the records still buffered (298 of 300 reached the broker).
func TestDemoProducerSendsEvery(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const events = 300
	producePayments(ctx, broker, 100_000, events, slog.New(slog.DiscardHandler))

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics("payments"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < events && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		got += fs.NumRecords()
	}
	if got != events {
		t.Fatalf("broker holds %d records after producing %d", got, events)
	}
}

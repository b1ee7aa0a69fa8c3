package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// Partitions added to a consumed topic (issue 26): franz-go learns of them
// only when it re-reads the brokers' metadata, every 5 minutes unless told
// otherwise, and in a consumer group only the group's leader acts on them.

// addPartitions raises topic to n partitions through the Kafka protocol and
// returns a producer that knows them (the broker's own one caches the old
// count).
func (b *broker) addPartitions(topic string, n int) *kgo.Client {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := b.adm.UpdatePartitions(ctx, n, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		b.t.Fatalf("raise %s to %d partitions: %v", topic, n, err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(prod.Close)
	return prod
}

func produceWith(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitNextIn waits until the named log, in one of stores, is at offset next.
func waitNextIn(t *testing.T, stores []*ledger.Store, name string, next int64) {
	t.Helper()
	var at []int64
	waitFor(t, fmt.Sprintf("log %s to reach offset %d in one of the stores", name, next), func() bool {
		at = at[:0]
		for _, s := range stores {
			pos := position(t, s, name)
			if pos == nil {
				at = append(at, -1)
				continue
			}
			at = append(at, pos.Next)
			if pos.Next >= next {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("positions by store %v", at) })
}

// TestKafkaAddedPartitions: a topic consumed with 2 partitions is raised to
// 5; the records of the new partitions reach their logs with the default
// settings, well within the test's patience (45 s; franz-go's own metadata
// refresh, 5 minutes, is not). Alone as a dynamic member, alone as a static
// one, and with two static members sharing the group.
func TestKafkaAddedPartitions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		instances []string // instance ids, one source each
		pattern   bool     // the topic given as a regular expression
	}{
		{"dynamic", []string{"none"}, false},
		{"static", []string{"ap-static"}, false},
		{"two members", []string{"ap-a", "ap-b"}, false},
		{"pattern", []string{"ap-re"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			b.createTopic("ap", 2)
			for p := range int32(2) {
				b.produce(numbered("ap", p, 0, 10)...)
			}
			var stores []*ledger.Store
			var srcs []*source
			for _, id := range c.instances {
				s := newStore(t)
				stores = append(stores, s)
				cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"ap"}, Group: "ap", InstanceID: id}
				if c.pattern {
					cfg.Topics, cfg.TopicRegex = []string{"^a.$"}, true
				}
				srcs = append(srcs, startSource(t, s, cfg))
			}
			for p := range int32(2) {
				waitNextIn(t, stores, ingest.LogName("ap", p), 10)
			}
			// Every member in the group with its share, so that the
			// group is stable when the partitions come.
			waitFor(t, "each member to have a partition", func() bool {
				for _, s := range srcs {
					if s.k.Ready() != nil || !(s.assigned("ap.0") || s.assigned("ap.1")) {
						return false
					}
				}
				return true
			}, nil)

			prod := b.addPartitions("ap", 5)
			added := time.Now()
			for p := range int32(5) {
				produceWith(t, prod, numbered("ap", p, 10, 5)...)
			}
			for p := range int32(5) {
				next := int64(15)
				if p >= 2 {
					next = 5
				}
				waitNextIn(t, stores, ingest.LogName("ap", p), next)
			}
			t.Logf("the new partitions were ledgered %v after they were added", time.Since(added).Round(time.Millisecond))
			for _, s := range srcs {
				s.waitReady()
			}
		})
	}
}

// TestKafkaUnconsumedPartitionNotReady: the group's leader is a consumer
// that is not auditd and re-reads the metadata only every 5 minutes, so
// nobody rebalances the group when partitions are added and auditd (not the
// leader) is never given them. Ready names them once they have gone
// unconsumed for longer than the source allows; once the other member
// leaves, auditd leads the group, takes them and is ready again.
func TestKafkaUnconsumedPartitionNotReady(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("un", 2)
	assigned := make(chan struct{}, 1)
	other, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumerGroup("un"), kgo.ConsumeTopics("un"),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// The first member to join: the group's leader from then on.
	select {
	case <-assigned:
	case <-time.After(patience):
		t.Fatal("the other member did not join")
	}

	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"un"}, Group: "un", InstanceID: "un-1",
		// A stall window longer than the client's fetch wait (5 s): a
		// partition assigned while a fetch waits is fetched only after it.
		StallWindow: 6 * time.Second, MetadataRefresh: 500 * time.Millisecond})
	waitFor(t, "auditd to have a partition", func() bool { return src.assigned("un.0") || src.assigned("un.1") }, nil)
	src.waitReady()

	prod := b.addPartitions("un", 4)
	for p := range int32(4) {
		produceWith(t, prod, numbered("un", p, 0, 3)...)
	}
	err = src.waitNotReady("un.2")
	t.Logf("Ready() = %v", err)
	if got := err.Error(); !strings.Contains(got, "un.3") || strings.Contains(got, "un.0") || strings.Contains(got, "un.1") {
		t.Errorf("Ready() = %v, want un.3 named too, and neither un.0 nor un.1 (each consumed by a member)", err)
	}

	waitFor(t, "kafka_unconsumed_partitions to count them", func() bool { return src.metric("kafka_unconsumed_partitions", "") == 2 },
		func() string { return fmt.Sprint(src.metric("kafka_unconsumed_partitions", "")) })

	other.Close() // leaves the group: auditd is its leader at the next join
	for p := range int32(4) {
		waitNext(t, store, ingest.LogName("un", p), 3)
	}
	src.waitReady()
	waitFor(t, "kafka_unconsumed_partitions to be 0", func() bool { return src.metric("kafka_unconsumed_partitions", "") == 0 }, nil)
}

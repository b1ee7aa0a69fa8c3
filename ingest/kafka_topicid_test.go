package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestKafkaTopicRecreatedWhileDown: a topic deleted and recreated while
// the source is down (the new partition holds more records than the log,
// so nothing about its offsets gives it away) is noticed by its topic id
// at assignment: a source_recreated violation naming both ids, the
// partition stopped (not ready, nothing ledgered from the new topic), the
// other partition of another topic unaffected.
func TestKafkaTopicRecreatedWhileDown(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("t", 1)
	b.createTopic("u", 1)
	b.produce(numbered("t", 0, 0, 1500)...)
	b.produce(numbered("u", 0, 0, 10)...)
	store := newStore(t)
	cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"t", "u"}}
	src := startSource(t, store, cfg)
	waitNext(t, store, "t.0", 1500)
	waitNext(t, store, "u.0", 10)
	before := position(t, store, "t.0")
	if before.TopicID == "" {
		t.Fatalf("position %+v records no topic id", before)
	}
	src.stop()

	ctx := context.Background()
	if _, err := b.adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	b.createTopic("t", 1)
	b.prod.PurgeTopicsFromClient("t")
	again := numbered("t", 0, 0, 1600)
	again[700].Value = []byte(`{"seq":"changed"}`)
	b.produce(again...)
	md, err := b.adm.Metadata(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	newID := ingest.TopicIDString(md.Topics["t"].ID)
	if newID == before.TopicID {
		t.Fatalf("the recreated topic has the old id %s", newID)
	}

	src = startSource(t, store, cfg)
	err = src.waitNotReady("partition t.0 stopped")
	var tr *ingest.TopicRecreatedError
	if !errors.As(err, &tr) || tr.Recorded != before.TopicID || tr.Current != newID || tr.NextOffset != 1500 {
		t.Fatalf("Ready() = %v, want a TopicRecreatedError from %s to %s at offset 1500", err, before.TopicID, newID)
	}
	waitFor(t, "a source_recreated violation", func() bool { return len(src.seenViolations()) > 0 }, nil)
	b.produce(numbered("u", 0, 10, 5)...)
	waitNext(t, store, "u.0", 15) // the other topic goes on
	src.stop()
	vs := src.seenViolations()
	if len(vs) != 1 || vs[0].Log != "t.0" || vs[0].Kind != ledger.IntegritySourceRecreated ||
		!strings.Contains(vs[0].Detail, before.TopicID) || !strings.Contains(vs[0].Detail, newID) {
		t.Fatalf("violations %+v, want one source_recreated of t.0 naming both topic ids", vs)
	}
	if n := src.metric("kafka_topic_recreated_total", "t.0"); n != 1 {
		t.Errorf("kafka_topic_recreated_total = %v, want 1", n)
	}
	after := position(t, store, "t.0")
	if !equalPositions(after, before) || after.TopicID != before.TopicID || logSize(store, "t.0") != 1500 {
		t.Errorf("log t.0 changed: position %+v (size %d), want %+v (size 1500)", after, logSize(store, "t.0"), before)
	}
	st, ok := src.k.Status("t.0")
	if !ok || st.TopicID != before.TopicID {
		t.Errorf("status %+v, want the recorded topic id", st)
	}
}

// TestKafkaPositionWithoutTopicID: a position written before topic ids
// were recorded decodes, and the source records the id at the partition's
// next assignment even when there is nothing new to read.
func TestKafkaPositionWithoutTopicID(t *testing.T) {
	t.Parallel()
	old := []byte(`{"topic":"t","partition":0,"next":3,"gap_offsets":0,"gap_count":0,"conflicts":0}`)
	p, err := ingest.DecodePosition(old)
	if err != nil || p.Topic != "t" || p.Next != 3 || p.TopicID != "" {
		t.Fatalf("DecodePosition(%s) = %+v, %v", old, p, err)
	}
	b := newBroker(t)
	b.createTopic("t", 1)
	recs := b.produce(numbered("t", 0, 0, 3)...)
	store := newStore(t)
	l, err := store.CreateLog("t.0")
	if err != nil {
		t.Fatal(err)
	}
	var es []ledger.Entry
	for _, r := range recs {
		es = append(es, entryOf(t, r))
	}
	if _, err := l.AppendSource(context.Background(), es, old); err != nil {
		t.Fatal(err)
	}
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"t"}})
	var pos *ingest.Position
	waitFor(t, "the topic id recorded", func() bool {
		pos = position(t, store, "t.0")
		return pos.TopicID != ""
	}, func() string { return fmt.Sprintf("position %+v", pos) })
	src.stop()
	if pos.Next != 3 || logSize(store, "t.0") != 3 || len(src.seenViolations()) != 0 {
		t.Errorf("position %+v, size %d, violations %+v", pos, logSize(store, "t.0"), src.seenViolations())
	}
}

// entryOf is an entry for a numbered record (its id and offset; the rest
// does not matter here).
func entryOf(t *testing.T, r *kgo.Record) ledger.Entry {
	t.Helper()
	return ledger.Entry{ID: numberedWant(r).id, Source: &merkle.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset},
		Time: r.Timestamp, Payload: r.Value, PayloadJSON: true}
}

package ingest_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/merkle"
)

// TestKafkaOversizeKey ledgers a record whose key is longer than a leaf can
// hold by the key's SHA-256, marked key_oversize, without stopping the
// partition for the records around it.
func TestKafkaOversizeKey(t *testing.T) {
	t.Parallel()
	b := newBroker(t, kfake.SeedTopics(1, "big"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "10000000"}))
	long := bytes.Repeat([]byte("k"), merkle.MaxKey+1)
	b.produce(rec("big", 0, []byte("a"), []byte(`{"n":1}`)), rec("big", 0, long, []byte(`{"n":2}`)), rec("big", 0, []byte("c"), []byte(`{"n":3}`)))
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"big"}})
	waitNext(t, store, "big.0", 3)
	src.stop()
	recs := entries(t, store, "big.0")
	sum := sha256.Sum256(long)
	if got := recs[1].Leaf; !bytes.Equal(got.Key, sum[:]) || got.Marks != merkle.MarkKeyOversize {
		t.Errorf("entry 1: key %x marks %v, want the key's SHA-256 marked key_oversize", got.Key, merkle.MarkNames(got.Marks))
	}
	if string(recs[2].Leaf.Key) != "c" || recs[2].Leaf.Marks != 0 {
		t.Errorf("entry 2: key %q marks %d", recs[2].Leaf.Key, recs[2].Leaf.Marks)
	}
}

// TestKafkaBadTopicName: a subscribed topic whose partitions cannot name a
// log stops only those partitions, with a not-ready state naming them; the
// other topics are consumed.
func TestKafkaBadTopicName(t *testing.T) {
	t.Parallel()
	b := newBroker(t, kfake.SeedTopics(1, "good", "_bad"))
	b.produce(numbered("good", 0, 0, 20)...)
	b.produce(numbered("_bad", 0, 0, 5)...)
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"good", "_bad"}})
	waitNext(t, store, "good.0", 20)
	var err error
	waitFor(t, "Ready to name the bad partition", func() bool {
		err = src.k.Ready()
		return err != nil && strings.Contains(err.Error(), "_bad.0")
	}, func() string { return fmt.Sprintf("Ready() = %v", err) })
	src.stop()
	if _, err := store.Log("_bad.0"); err == nil {
		t.Error("a log was created for the invalid name")
	}
}

// TestKafkaOversizeHeaders ledgers a record whose headers would make a leaf
// longer than an entry bundle can carry with its header values over 32
// bytes replaced by their SHA-256, marked header_oversize, and a record
// whose headers fit as it is.
func TestKafkaOversizeHeaders(t *testing.T) {
	t.Parallel()
	b := newBroker(t, kfake.SeedTopics(1, "hdr"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "10000000"}))
	big := strings.Repeat("v", 70000)
	b.produce(rec("hdr", 0, []byte("a"), []byte(`{"n":1}`), "small", "s", "big", big),
		rec("hdr", 0, []byte("b"), []byte(`{"n":2}`), "fits", strings.Repeat("w", 60000)))
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"hdr"}})
	waitNext(t, store, "hdr.0", 2)
	src.stop()
	recs := entries(t, store, "hdr.0")
	sum := sha256.Sum256([]byte(big))
	got := recs[0].Leaf
	if got.Marks != merkle.MarkHeaderOversize || len(got.Headers) != 2 || string(got.Headers[0].Value) != "s" || !bytes.Equal(got.Headers[1].Value, sum[:]) {
		t.Errorf("entry 0: marks %v headers %q, want the big value's SHA-256 marked header_oversize", merkle.MarkNames(got.Marks), got.Headers)
	}
	if n := len(recs[0].LeafBytes); n > merkle.MaxLeafSize {
		t.Errorf("entry 0: leaf of %d bytes", n)
	}
	if got := recs[1].Leaf; got.Marks != 0 || len(got.Headers[0].Value) != 60000 {
		t.Errorf("entry 1: marks %v, header of %d bytes, want it as produced", merkle.MarkNames(got.Marks), len(got.Headers[0].Value))
	}
}

package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/merkle"
)

// The Kafka source's integration tests, against kfake: a Kafka-protocol
// broker on loopback, spoken to over TCP by the source's own client.

// produced is a record produced for a test with the entry it must become.
type produced struct {
	rec  *kgo.Record
	want wantEntry
}

// TestKafkaRecords ledgers records of several topics and partitions and
// checks every entry exactly: offsets, ids, keys, headers, payloads, marks.
func TestKafkaRecords(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("a", 3)
	b.createTopic("b", 2)

	const max = 64
	json64 := []byte(`{"pad":"` + strings.Repeat("x", max-10) + `"}`)
	json65 := []byte(`{"pad":"` + strings.Repeat("x", max-9) + `"}`)
	if len(json64) != max || len(json65) != max+1 {
		t.Fatal("bad test values")
	}
	longID := strings.Repeat("i", merkle.MaxID)

	var ps []produced
	add := func(r *kgo.Record, w wantEntry) { ps = append(ps, produced{r, w}) }
	js := wantEntry{json: true}
	// a/0: the variety of one partition, in order.
	add(rec("a", 0, []byte("k1"), []byte(`{"n":1}`), "id", "evt-1", "trace", "abc"), wantEntry{id: "evt-1", json: true})
	add(rec("a", 0, nil, []byte(`{"n":2}`)), js)                                        // no key, no headers
	add(rec("a", 0, []byte{}, []byte(`[]`)), js)                                        // empty key: a key
	add(rec("a", 0, []byte("k"), []byte{}), wantEntry{marks: merkle.MarkEmpty | merkle.MarkNotJSON})
	add(rec("a", 0, []byte("k"), nil), wantEntry{marks: merkle.MarkEmpty | merkle.MarkNotJSON}) // a tombstone
	add(rec("a", 0, nil, []byte("not json at all")), wantEntry{marks: merkle.MarkNotJSON})
	add(rec("a", 0, nil, []byte{0xff, 0xfe, 'x'}), wantEntry{marks: merkle.MarkNotUTF8 | merkle.MarkNotJSON})
	// A JSON string holding a byte that is not UTF-8: encoding/json calls
	// it valid JSON, so the record is marked not_utf8 alone.
	add(rec("a", 0, nil, []byte("\"\xff\"")), wantEntry{marks: merkle.MarkNotUTF8, json: true})
	add(rec("a", 0, nil, json65, "id", "big"), wantEntry{id: "big", marks: merkle.MarkOversize, pruned: true})
	add(rec("a", 0, nil, json64), js) // at the limit: kept
	add(rec("a", 0, []byte("k1"), []byte(`{"n":1}`), "id", "evt-1"), wantEntry{marks: merkle.MarkDuplicateID, json: true})
	add(rec("a", 0, nil, []byte(`1`), "id", ""), js)                 // an empty id is none
	add(rec("a", 0, nil, []byte(`2`), "id", "\xff"), js)             // so is one that is not UTF-8
	add(rec("a", 0, nil, []byte(`3`), "id", longID+"x"), js)         // and one too long
	add(rec("a", 0, nil, []byte(`4`), "id", longID), wantEntry{id: longID, json: true})
	add(rec("a", 0, nil, []byte(`5`), "x", "1", "id", "first", "id", "second", "x", ""), wantEntry{id: "first", json: true})
	add(rec("a", 0, nil, []byte(`6`), "bin", "\x00\x01\xfe\xff", "ID", "upper"), js) // header names are case-sensitive
	// Ids are per log: the same id in another partition is no duplicate.
	add(rec("a", 1, []byte("k1"), []byte(`{"n":1}`), "id", "evt-1"), wantEntry{id: "evt-1", json: true})
	add(rec("a", 1, nil, []byte(`{"n":2}`), "id", "evt-1"), wantEntry{marks: merkle.MarkDuplicateID, json: true})
	add(rec("a", 1, nil, []byte(`{"n":3}`), "id", "evt-1"), wantEntry{marks: merkle.MarkDuplicateID, json: true})
	add(rec("a", 2, nil, json65), wantEntry{marks: merkle.MarkOversize, pruned: true})
	add(rec("a", 2, nil, append(json65, 0xff)), wantEntry{marks: merkle.MarkOversize, pruned: true}) // oversize wins over the other marks
	add(rec("b", 0, []byte("kb"), []byte(`{"b":0}`), "id", "evt-1"), wantEntry{id: "evt-1", json: true})
	for i := range 30 {
		add(rec("b", 0, []byte(fmt.Sprint(i)), fmt.Appendf(nil, `{"b":%d}`, i+1)), js)
	}
	// b/1 stays empty.

	recs := make([]*kgo.Record, len(ps))
	for i := range ps {
		recs[i] = ps[i].rec
	}
	b.produce(recs...)
	for i := range ps {
		if ps[i].want.id == "" {
			ps[i].want.id = positionID(ps[i].rec.Topic, ps[i].rec.Partition, ps[i].rec.Offset)
		}
	}

	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"a", "b"}, MaxRecordBytes: max, BatchRecords: 5})
	byLog := map[string][]produced{}
	for _, p := range ps {
		name := ingest.LogName(p.rec.Topic, p.rec.Partition)
		byLog[name] = append(byLog[name], p)
	}
	for name, ps := range byLog {
		waitNext(t, store, name, ps[len(ps)-1].rec.Offset+1)
	}
	src.waitReady()
	src.stop()

	for name, ps := range byLog {
		topic, part := ps[0].rec.Topic, ps[0].rec.Partition
		got := checkOffsets(t, store, topic, part, upTo(0, int64(len(ps))))
		for i, p := range ps {
			checkEntry(t, got[i], p.rec, p.want)
		}
		pos := position(t, store, name)
		want := ingest.Position{Topic: topic, Partition: part, Next: int64(len(ps))}
		if !equalPositions(pos, &want) {
			t.Errorf("log %s position %+v, want %+v", name, pos, want)
		}
		if c := b.committed("auditd", topic, part); c != want.Next {
			t.Errorf("group auditd committed offset %d for %s, want %d", c, name, want.Next)
		}
	}
	if n := logSize(store, "b.1"); n != 0 {
		t.Errorf("log b.1 holds %d entries, want 0", n)
	}
	var names []string
	for _, li := range store.Logs() {
		if li.Size > 0 {
			names = append(names, li.Name)
		}
	}
	if want := []string{"a.0", "a.1", "a.2", "b.0"}; !slices.Equal(names, want) {
		t.Errorf("logs with entries %q, want %q", names, want)
	}
	if v := src.seenViolations(); len(v) != 0 {
		t.Errorf("violations %+v, want none", v)
	}
	if got := src.metric("kafka_duplicate_ids_total", "a.1"); got != 2 {
		t.Errorf("kafka_duplicate_ids_total{log=a.1} = %v, want 2", got)
	}
	if got := src.metric("kafka_records_total", "b.0"); got != 31 {
		t.Errorf("kafka_records_total{log=b.0} = %v, want 31", got)
	}
}

// TestKafkaIDHeader takes the event id from a configured header.
func TestKafkaIDHeader(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("c", 1)
	ps := []produced{
		{rec("c", 0, nil, []byte(`0`), "id", "x"), wantEntry{json: true}},
		{rec("c", 0, nil, []byte(`1`), "id", "x", "event-id", "e1"), wantEntry{id: "e1", json: true}},
		{rec("c", 0, nil, []byte(`2`), "event-id", "e2"), wantEntry{id: "e2", json: true}},
		{rec("c", 0, nil, []byte(`3`), "event-id", "e1"), wantEntry{marks: merkle.MarkDuplicateID, json: true}},
		{rec("c", 0, nil, []byte(`4`), "event-id", "x"), wantEntry{id: "x", json: true}},
	}
	var recs []*kgo.Record
	for _, p := range ps {
		recs = append(recs, p.rec)
	}
	b.produce(recs...)
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"c"}, IDHeader: "event-id"})
	waitNext(t, store, "c.0", int64(len(ps)))
	src.stop()
	got := checkOffsets(t, store, "c", 0, upTo(0, int64(len(ps))))
	for i, p := range ps {
		if p.want.id == "" {
			p.want.id = positionID("c", 0, p.rec.Offset)
		}
		checkEntry(t, got[i], p.rec, p.want)
	}
}

// TestKafkaPositionIDTaken: a producer's id that is the position id of a
// later record of the partition must not stop the partition.
func TestKafkaPositionIDTaken(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("z", 1)
	ps := []produced{
		{rec("z", 0, nil, []byte(`0`), "id", "z/0/1"), wantEntry{id: "z/0/1", json: true}},
		{rec("z", 0, nil, []byte(`1`)), wantEntry{id: "z/0/1#1", marks: merkle.MarkDuplicateID, json: true}},
		{rec("z", 0, nil, []byte(`2`), "id", "z/0/4#1"), wantEntry{id: "z/0/4#1", json: true}},
		{rec("z", 0, nil, []byte(`3`), "id", "z/0/4"), wantEntry{id: "z/0/4", json: true}},
		{rec("z", 0, nil, []byte(`4`)), wantEntry{id: "z/0/4#2", marks: merkle.MarkDuplicateID, json: true}},
		{rec("z", 0, nil, []byte(`5`), "id", "z/0/6"), wantEntry{id: "z/0/6", json: true}},
		{rec("z", 0, nil, []byte(`6`), "id", "z/0/6#1"), wantEntry{id: "z/0/6#1", json: true}},
		{rec("z", 0, nil, []byte(`7`), "id", "z/0/6"), wantEntry{id: "z/0/7", marks: merkle.MarkDuplicateID, json: true}},
		{rec("z", 0, nil, []byte(`8`), "id", "z/0/9"), wantEntry{id: "z/0/9", json: true}},
		{rec("z", 0, nil, []byte(`9`), "id", "z/0/9"), wantEntry{id: "z/0/9#1", marks: merkle.MarkDuplicateID, json: true}},
	}
	var recs []*kgo.Record
	for _, p := range ps {
		recs = append(recs, p.rec)
	}
	b.produce(recs...)
	// Batches of one and of all: the ids must not depend on the batching.
	for _, batch := range []int{1, 100} {
		store := newStore(t)
		src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"z"}, Group: fmt.Sprint("g", batch), BatchRecords: batch})
		waitNext(t, store, "z.0", int64(len(ps)))
		src.stop()
		got := checkOffsets(t, store, "z", 0, upTo(0, int64(len(ps))))
		for i, p := range ps {
			checkEntry(t, got[i], p.rec, p.want)
		}
	}
}

func equalPositions(a, b *ingest.Position) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Topic == b.Topic && a.Partition == b.Partition && a.Next == b.Next &&
		a.GapOffsets == b.GapOffsets && a.GapCount == b.GapCount && slices.Equal(a.Gaps, b.Gaps) &&
		a.Conflicts == b.Conflicts && slices.Equal(a.Conflicted, b.Conflicted)
}

var (
	_ = bytes.Equal
	_ = context.Background
)

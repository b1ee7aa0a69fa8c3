package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
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
	add(rec("a", 0, nil, []byte(`{"n":2}`)), js) // no key, no headers
	add(rec("a", 0, []byte{}, []byte(`[]`)), js) // empty key: a key
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
	add(rec("a", 0, nil, []byte(`1`), "id", ""), js)         // an empty id is none
	add(rec("a", 0, nil, []byte(`2`), "id", "\xff"), js)     // so is one that is not UTF-8
	add(rec("a", 0, nil, []byte(`3`), "id", longID+"x"), js) // and one too long
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
	flagged := 0
	for _, p := range ps {
		if p.want.marks&^merkle.MarkDuplicateID != 0 {
			flagged++
		}
	}
	if got := src.metric("kafka_flagged_records_total", ""); got != float64(flagged) {
		t.Errorf("kafka_flagged_records_total = %v, want %d", got, flagged)
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

// TestKafkaRestart stops the source mid-way, reopens the store as a new
// process would and consumes on: every offset once, contiguous.
func TestKafkaRestart(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("r", 2)
	var all [2][]*kgo.Record
	for p := range int32(2) {
		all[p] = b.produce(numbered("r", p, 0, 1500)...)
	}
	keys, dir := newKeys(t), t.TempDir()
	store := openStore(t, dir, keys)
	cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"r"}, BatchRecords: 10}
	src := startSource(t, store, cfg)
	waitFor(t, "some progress", func() bool { return logSize(store, "r.0")+logSize(store, "r.1") >= 200 }, nil)
	src.stop()
	var before [2]uint64
	for p := range int32(2) {
		name := ingest.LogName("r", p)
		before[p] = logSize(store, name)
		pos := position(t, store, name)
		if pos == nil && before[p] > 0 || pos != nil && uint64(pos.Next) != before[p] {
			t.Fatalf("log %s: %d entries, position %+v", name, before[p], pos)
		}
	}
	t.Logf("stopped at %v entries", before)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	for p := range int32(2) {
		all[p] = append(all[p], b.produce(numbered("r", p, 1500, 500)...)...)
	}
	store = openStore(t, dir, keys)
	src = startSource(t, store, cfg)
	for p := range int32(2) {
		waitNext(t, store, ingest.LogName("r", p), 2000)
	}
	src.stop()
	for p := range int32(2) {
		name := ingest.LogName("r", p)
		got := checkOffsets(t, store, "r", p, upTo(0, 2000))
		for i, r := range all[p] {
			checkEntry(t, got[i], r, numberedWant(r))
		}
		if pos, want := position(t, store, name), (&ingest.Position{Topic: "r", Partition: p, Next: 2000}); !equalPositions(pos, want) {
			t.Errorf("log %s position %+v, want %+v", name, pos, want)
		}
		// The second run started where the ledger stopped.
		if n := src.metric("kafka_redelivered_records_total", name); n != 0 {
			t.Errorf("%s: %v records redelivered, want 0", name, n)
		}
		if n := src.metric("kafka_records_total", name); n != float64(2000-before[p]) {
			t.Errorf("%s: second run ledgered %v records, want %d", name, n, 2000-before[p])
		}
		if c := b.committed("auditd", "r", p); c != 2000 {
			t.Errorf("group offset of %s: %d, want 2000", name, c)
		}
	}
}

// TestKafkaResumeFromLedger: the source resumes from the ledger's position
// whatever the group has committed, and commits the ledger's position to
// the group, so that the usual lag tools see its progress.
func TestKafkaResumeFromLedger(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("g", 2)
	for p := range int32(2) {
		b.produce(numbered("g", p, 0, 100)...)
	}
	store := newStore(t)
	cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"g"}, Group: "audit"}
	src := startSource(t, store, cfg)
	for p := range int32(2) {
		waitNext(t, store, ingest.LogName("g", p), 100)
	}
	src.stop()
	for p := range int32(2) {
		if c := b.committed("audit", "g", p); c != 100 {
			t.Fatalf("group offset of g/%d after the first run: %d, want 100 (the ledger's next offset)", p, c)
		}
	}

	// Rewind the group: to the start for one partition, to an older offset
	// for the other.
	var os kadm.Offsets
	os.AddOffset("g", 0, 0, -1)
	os.AddOffset("g", 1, 40, -1)
	resp, err := b.adm.CommitOffsets(context.Background(), "audit", os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("rewind the group: %v", err)
	}
	if c0, c1 := b.committed("audit", "g", 0), b.committed("audit", "g", 1); c0 != 0 || c1 != 40 {
		t.Fatalf("group offsets after the rewind: %d, %d", c0, c1)
	}

	var all [2][]*kgo.Record
	for p := range int32(2) {
		all[p] = b.produce(numbered("g", p, 100, 50)...)
	}
	src = startSource(t, store, cfg)
	for p := range int32(2) {
		waitNext(t, store, ingest.LogName("g", p), 150)
	}
	src.stop()
	for p := range int32(2) {
		name := ingest.LogName("g", p)
		got := checkOffsets(t, store, "g", p, upTo(0, 150))
		for i, r := range all[p] {
			checkEntry(t, got[100+i], r, numberedWant(r))
		}
		if n := src.metric("kafka_redelivered_records_total", name); n != 0 {
			t.Errorf("%s: %v records redelivered, want 0: the source read from the group's offset", name, n)
		}
		if n := src.metric("kafka_records_total", name); n != 50 {
			t.Errorf("%s: %v records ledgered, want 50", name, n)
		}
		if c := b.committed("audit", "g", p); c != 150 {
			t.Errorf("group offset of %s: %d, want 150", name, c)
		}
	}
}

// TestKafkaReassignment: two instances, each with its own store, share a
// group. Partitions move between them; each resumes from its own ledger,
// not from the offsets the other committed to the group.
func TestKafkaReassignment(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const parts = 4
	b.createTopic("m", parts)
	names := make([]string, parts)
	all := make([][]*kgo.Record, parts)
	for p := range int32(parts) {
		names[p] = ingest.LogName("m", p)
		all[p] = b.produce(numbered("m", p, 0, 50)...)
	}
	cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"m"}, Group: "shared", BatchRecords: 8}
	storeA, storeB := newStore(t), newStore(t)
	a := startSource(t, storeA, cfg)
	for _, name := range names {
		waitNext(t, storeA, name, 50)
	}

	bsrc := startSource(t, storeB, cfg)
	var ofA, ofB []int32
	waitFor(t, "the partitions to be split between A and B", func() bool {
		ofA, ofB = nil, nil
		for p, name := range names {
			inA, inB := a.assigned(name), bsrc.assigned(name)
			if inA == inB {
				return false
			}
			if inA {
				ofA = append(ofA, int32(p))
			} else {
				ofB = append(ofB, int32(p))
			}
		}
		return len(ofA) > 0 && len(ofB) > 0
	}, func() string { return fmt.Sprintf("A has %v, B has %v", ofA, ofB) })
	t.Logf("A has partitions %v, B has %v", ofA, ofB)
	// B has no ledger for its partitions: it reads them from the start.
	for _, p := range ofB {
		waitNext(t, storeB, names[p], 50)
	}
	for p := range int32(parts) {
		all[p] = append(all[p], b.produce(numbered("m", p, 50, 50)...)...)
	}
	for _, p := range ofA {
		waitNext(t, storeA, names[p], 100)
	}
	for _, p := range ofB {
		waitNext(t, storeB, names[p], 100)
		waitFor(t, fmt.Sprintf("B to commit offset 100 for %s", names[p]), func() bool { return b.committed("shared", "m", p) == 100 }, nil)
		if pos := position(t, storeA, names[p]); pos.Next != 50 {
			t.Fatalf("A consumed %s while B had it: position %+v", names[p], pos)
		}
	}

	bsrc.stop()
	waitFor(t, "A to own every partition again", func() bool {
		for _, name := range names {
			if !a.assigned(name) {
				return false
			}
		}
		return true
	}, nil)
	for p := range int32(parts) {
		all[p] = append(all[p], b.produce(numbered("m", p, 100, 10)...)...)
	}
	for _, name := range names {
		waitNext(t, storeA, name, 110)
	}
	a.stop()

	for p := range int32(parts) {
		got := checkOffsets(t, storeA, "m", p, upTo(0, 110))
		for i, r := range all[p] {
			checkEntry(t, got[i], r, numberedWant(r))
		}
		if pos, want := position(t, storeA, names[p]), (&ingest.Position{Topic: "m", Partition: p, Next: 110}); !equalPositions(pos, want) {
			t.Errorf("A: log %s position %+v, want %+v", names[p], pos, want)
		}
		if n := a.metric("kafka_redelivered_records_total", names[p]); n != 0 {
			t.Errorf("A: %s: %v records redelivered, want 0", names[p], n)
		}
		if c := b.committed("shared", "m", p); c != 110 {
			t.Errorf("group offset of %s: %d, want 110", names[p], c)
		}
	}
	for _, p := range ofB {
		gotB := checkOffsets(t, storeB, "m", p, upTo(0, 100))
		gotA := entries(t, storeA, names[p])
		for i := range gotB {
			if !bytes.Equal(gotB[i].LeafBytes, gotA[i].LeafBytes) {
				t.Errorf("%s entry %d: the leaves of A and B differ", names[p], i)
			}
		}
	}
	for _, p := range ofA {
		if n := logSize(storeB, names[p]); n != 0 {
			t.Errorf("B ledgered %d records of %s, which it never had", n, names[p])
		}
	}
}

// TestKafkaBrokerRestart closes the broker mid-consumption and starts it
// again on the same port and data: the source reports the outage, keeps
// running and resumes without loss.
func TestKafkaBrokerRestart(t *testing.T) {
	t.Parallel()
	opts := []kfake.Opt{kfake.Ports(freePort(t)), kfake.DataDir(t.TempDir()), kfake.SyncWrites()}
	b := newBroker(t, opts...)
	b.createTopic("br", 2)
	// Small produce batches and fetches: consumption takes many fetches,
	// so that the broker goes down in the middle of it.
	var all [2][]*kgo.Record
	for p := range int32(2) {
		for i := 0; i < 3000; i += 10 {
			all[p] = append(all[p], b.produce(numbered("br", p, i, 10)...)...)
		}
	}
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"br"}, BatchRecords: 3, FetchMaxBytes: 512})
	src.waitReady()
	waitFor(t, "some progress", func() bool { return logSize(store, "br.0")+logSize(store, "br.1") >= 100 }, nil)

	b.close()
	err := src.waitNotReady("")
	t.Logf("with the broker down, Ready() = %v", err)
	t.Logf("%d of 6000 records ledgered when the broker went down", logSize(store, "br.0")+logSize(store, "br.1"))
	if !src.running() {
		t.Fatal("Run returned")
	}

	b2 := newBroker(t, opts...)
	if !slices.Equal(b2.addrs, b.addrs) {
		t.Fatalf("the broker came back at %v, not %v", b2.addrs, b.addrs)
	}
	for p := range int32(2) {
		all[p] = append(all[p], b2.produce(numbered("br", p, 3000, 200)...)...)
		if last := all[p][len(all[p])-1].Offset; last != 3199 {
			t.Fatalf("the restarted broker put the last record at offset %d: it lost data", last)
		}
	}
	for p := range int32(2) {
		waitNext(t, store, ingest.LogName("br", p), 3200)
	}
	src.waitReady()
	src.stop()
	for p := range int32(2) {
		got := checkOffsets(t, store, "br", p, upTo(0, 3200))
		for i, r := range all[p] {
			checkEntry(t, got[i], r, numberedWant(r))
		}
		if pos := position(t, store, ingest.LogName("br", p)); pos.GapOffsets != 0 || pos.Conflicts != 0 {
			t.Errorf("br.%d position %+v, want no gaps or conflicts", p, pos)
		}
	}
}

// TestKafkaRewrittenPartition deletes and recreates a topic the source has
// consumed and writes other records at the offsets it holds: the original
// leaves stay, each differing record is a conflict in the log's position
// and a violation, identical ones are not, and new offsets are ledgered.
//
//   - running: the source runs throughout and sees the topic replaced;
//     the new partition gets 4 records, then the rest.
//   - running/all: the same, but the new partition holds all its records,
//     more than the log, before the source notices.
//   - restarted: the source is down meanwhile and starts past the end of
//     the new partition (offset out of range: it starts from the first).
func TestKafkaRewrittenPartition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		restart, allAtOnce bool
	}{
		{"running", false, false},
		{"running/all", false, true},
		{"restarted", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRewrittenPartition(t, tc.restart, tc.allAtOnce)
		})
	}
}

func testRewrittenPartition(t *testing.T, restart, allAtOnce bool) {
	b := newBroker(t)
	b.createTopic("t", 1)
	orig := make([]*kgo.Record, 10)
	for i := range orig {
		orig[i] = rec("t", 0, []byte(fmt.Sprint("k", i)), fmt.Appendf(nil, `{"orig":%d}`, i), "id", fmt.Sprint("o", i))
	}
	orig[4].Value = []byte("not JSON") // flagged, and delivered again
	b.produce(orig...)
	store := newStore(t)
	cfg := ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"t"}, BatchRecords: 3}
	src := startSource(t, store, cfg)
	waitNext(t, store, "t.0", 10)
	first := entries(t, store, "t.0")
	firstPos := position(t, store, "t.0")
	if firstPos.TopicID == "" {
		t.Fatalf("position %+v records no topic id", firstPos)
	}
	if restart {
		src.stop()
	}

	ctx := context.Background()
	if _, err := b.adm.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	b.createTopic("t", 1)
	b.prod.PurgeTopicsFromClient("t") // the producer too holds on to the old topic
	// 13 records: 4 and 5 the same as before, 0-3 and 6-9 different,
	// 10-12 new.
	var again []*kgo.Record
	for i := range 13 {
		r := rec("t", 0, []byte(fmt.Sprint("k", i)), fmt.Appendf(nil, `{"other":%d}`, i), "id", fmt.Sprint("o", i))
		if i == 4 || i == 5 {
			r = rec("t", 0, orig[i].Key, orig[i].Value, "id", fmt.Sprint("o", i))
		}
		again = append(again, r)
	}
	if allAtOnce {
		b.produce(again...)
	} else {
		b.produce(again[:4]...)
	}
	if restart {
		// The topic id changed while the source was down: it reads the
		// partition again only when told to (see
		// TestKafkaTopicRecreatedWhileDown for the default).
		cfg.ResumeRecreated = true
		src = startSource(t, store, cfg)
	}
	if !allAtOnce {
		waitConflicts(t, store, "t.0", 4)
		b.produce(again[4:]...)
	}
	var wantConflicts []ingest.Conflict
	for _, r := range again {
		if r.Offset < 10 && r.Offset != 4 && r.Offset != 5 {
			wantConflicts = append(wantConflicts, ingest.Conflict{Offset: r.Offset, Index: uint64(r.Offset), LeafHash: leafHash(t, r, "o"+fmt.Sprint(r.Offset)).String()})
		}
	}
	waitNext(t, store, "t.0", 13)
	waitConflicts(t, store, "t.0", 8)
	src.stop()

	got := checkOffsets(t, store, "t", 0, upTo(0, 13))
	for i := range 10 {
		if !bytes.Equal(got[i].LeafBytes, first[i].LeafBytes) {
			t.Errorf("entry %d changed", i)
		}
		w := wantEntry{id: fmt.Sprint("o", i), json: true}
		if i == 4 {
			w = wantEntry{id: "o4", marks: merkle.MarkNotJSON}
		}
		checkEntry(t, got[i], orig[i], w)
	}
	for i, r := range again[10:] {
		checkEntry(t, got[10+i], r, wantEntry{id: fmt.Sprint("o", 10+i), json: true})
	}
	pos := position(t, store, "t.0")
	want := &ingest.Position{Topic: "t", Partition: 0, Next: 13, Conflicts: 8, Conflicted: wantConflicts}
	if !equalPositions(pos, want) {
		t.Errorf("position\n%+v, want\n%+v", pos, want)
	}
	var vs []ingest.Violation
	recreated := 0
	for _, v := range src.seenViolations() {
		if v.Kind == ledger.IntegritySourceRecreated {
			recreated++
			continue
		}
		vs = append(vs, v)
	}
	if recreated != 1 {
		t.Errorf("%d source_recreated violations, want 1", recreated)
	}
	if pos.TopicID == "" || pos.TopicID == firstPos.TopicID {
		t.Errorf("position's topic id %q, want the new topic's (the first was %q)", pos.TopicID, firstPos.TopicID)
	}
	if len(vs) != len(wantConflicts) {
		t.Fatalf("%d violations %+v, want %d", len(vs), vs, len(wantConflicts))
	}
	for i, v := range vs {
		c := wantConflicts[i]
		if v.Log != "t.0" || v.Kind != "offset_conflict" || v.Offset != c.Offset || v.Index != c.Index || v.LeafHash.String() != c.LeafHash {
			t.Errorf("violation %d: %+v, want %+v", i, v, c)
		}
	}
	if n := src.metric("kafka_offset_conflicts_total", "t.0"); n != 8 {
		t.Errorf("kafka_offset_conflicts_total = %v, want 8", n)
	}
	// Flagged records are counted when ledgered, not when delivered again.
	wantFlagged := 1.0
	if restart {
		wantFlagged = 0 // the second source ledgered offsets 10-12 only
	}
	if n := src.metric("kafka_flagged_records_total", ""); n != wantFlagged {
		t.Errorf("kafka_flagged_records_total = %v, want %v", n, wantFlagged)
	}
}

// TestKafkaTransactions: transaction markers occupy offsets, which the log
// records as gaps; entries keep their offsets. The source reads
// uncommitted, so an aborted transaction's records are ledgered too.
func TestKafkaTransactions(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	b.createTopic("x", 1)
	txp, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.TransactionalID("tx-1"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txp.Close()
	ctx := context.Background()
	txn := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) []*kgo.Record {
		t.Helper()
		if err := txp.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txp.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txp.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
		return recs
	}
	var ledgered []*kgo.Record
	ledgered = append(ledgered, txn(kgo.TryCommit, numbered("x", 0, 0, 3)...)...) // 0-2, marker 3
	ledgered = append(ledgered, txn(kgo.TryAbort, numbered("x", 0, 3, 2)...)...)  // 4-5, marker 6
	ledgered = append(ledgered, b.produce(numbered("x", 0, 5, 1)...)...)          // 7
	ledgered = append(ledgered, txn(kgo.TryCommit, numbered("x", 0, 6, 2)...)...) // 8-9, marker 10
	ledgered = append(ledgered, b.produce(numbered("x", 0, 8, 1)...)...)          // 11
	var offs []int64
	for _, r := range ledgered {
		offs = append(offs, r.Offset)
	}
	if want := []int64{0, 1, 2, 4, 5, 7, 8, 9, 11}; !slices.Equal(offs, want) {
		t.Fatalf("the broker put the records at offsets %v, want %v", offs, want)
	}

	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"x"}})
	waitNext(t, store, "x.0", 12)
	// A transaction committed last: its marker is the partition's last
	// offset.
	ledgered = append(ledgered, txn(kgo.TryCommit, numbered("x", 0, 9, 2)...)...) // 12-13, marker 14
	waitNext(t, store, "x.0", 14)
	src.stop()

	got := checkOffsets(t, store, "x", 0, append(offs, 12, 13))
	for i, r := range ledgered {
		checkEntry(t, got[i], r, numberedWant(r))
	}
	pos := position(t, store, "x.0")
	// The marker at 14 is not a gap yet: the source sees that it skipped
	// an offset only when it reads a record after it.
	want := &ingest.Position{Topic: "x", Partition: 0, Next: 14, GapOffsets: 3, GapCount: 3, Gaps: []ingest.Gap{{From: 3, To: 3}, {From: 6, To: 6}, {From: 10, To: 10}}}
	if !equalPositions(pos, want) {
		t.Errorf("position %+v, want %+v", pos, want)
	}
	if n := src.metric("kafka_gap_offsets_total", "x.0"); n != 3 {
		t.Errorf("kafka_gap_offsets_total = %v, want 3", n)
	}
}

// TestKafkaDeterminism: two stores consuming the same partitions
// independently, in different batches, build byte-identical logs.
func TestKafkaDeterminism(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const parts = 3
	b.createTopic("d", parts)
	for p := range int32(parts) {
		var recs []*kgo.Record
		for i := range 300 {
			var v []byte
			switch i % 10 {
			case 0:
				v = []byte("plain text")
			case 1:
				v = []byte{0xff, byte(i)}
			case 2:
				v = nil
			case 3:
				v = []byte(strings.Repeat("o", 200)) // oversize
			default:
				v = fmt.Appendf(nil, `{"d":%d}`, i)
			}
			var h []string
			if i%4 == 0 {
				h = []string{"id", fmt.Sprint("dup-", i%40), "n", fmt.Sprint(i)} // repeats: duplicate ids
			}
			recs = append(recs, rec("d", p, []byte(fmt.Sprint(i%5)), v, h...))
		}
		b.produce(recs...)
	}
	s1, s2 := newStore(t), newStore(t)
	src1 := startSource(t, s1, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"d"}, Group: "one", BatchRecords: 7, FetchMaxBytes: 2048, MaxRecordBytes: 100})
	src2 := startSource(t, s2, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"d"}, Group: "two", BatchRecords: 4096, MaxRecordBytes: 100})
	for p := range int32(parts) {
		waitNext(t, s1, ingest.LogName("d", p), 300)
		waitNext(t, s2, ingest.LogName("d", p), 300)
	}
	src1.stop()
	src2.stop()
	for p := range int32(parts) {
		name := ingest.LogName("d", p)
		e1 := checkOffsets(t, s1, "d", p, upTo(0, 300))
		e2 := checkOffsets(t, s2, "d", p, upTo(0, 300))
		dups := 0
		for i := range e1 {
			if !bytes.Equal(e1[i].LeafBytes, e2[i].LeafBytes) || !bytes.Equal(e1[i].Payload, e2[i].Payload) {
				t.Fatalf("%s entry %d differs:\n%+v\n%+v", name, i, e1[i].Leaf, e2[i].Leaf)
			}
			if e1[i].Leaf.Marks&merkle.MarkDuplicateID != 0 {
				dups++
			}
		}
		if dups != 65 {
			t.Errorf("%s: %d duplicate ids, want 65", name, dups)
		}
		l1, _ := s1.Log(name)
		l2, _ := s2.Log(name)
		for n := uint64(1); n <= 300; n++ {
			r1, err1 := l1.RootAt(n)
			r2, err2 := l2.RootAt(n)
			if err1 != nil || err2 != nil || r1 != r2 {
				t.Fatalf("%s: roots at size %d differ: %v %v %v %v", name, n, r1, err1, r2, err2)
			}
		}
		if l1.Info().Root != l2.Info().Root {
			t.Errorf("%s: the logs' roots differ", name)
		}
	}
}

// TestKafkaUnknownTopic: a topic that does not exist makes the source not
// ready, naming it; once created, it is consumed.
func TestKafkaUnknownTopic(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: b.addrs, Topics: []string{"nope"}})
	err := src.waitNotReady(`"nope"`)
	t.Logf("Ready() = %v", err)
	if !src.running() {
		t.Fatal("Run returned")
	}
	b.createTopic("nope", 1)
	recs := b.produce(numbered("nope", 0, 0, 3)...)
	waitNext(t, store, "nope.0", 3)
	src.waitReady()
	src.stop()
	got := checkOffsets(t, store, "nope", 0, upTo(0, 3))
	for i, r := range recs {
		checkEntry(t, got[i], r, numberedWant(r))
	}
}

// TestKafkaUnreachable: with no broker listening, Ready says so, Run keeps
// going and returns nil when its context ends.
func TestKafkaUnreachable(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	store := newStore(t)
	src := startSource(t, store, ingest.KafkaConfig{Brokers: []string{addr}, Topics: []string{"t"}})
	err := src.waitNotReady("unreachable")
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("Ready() = %v, want it to name the broker %s", err, addr)
	}
	if !src.running() {
		t.Fatal("Run returned")
	}
	src.stop()
	if n := len(store.Logs()); n != 0 {
		t.Errorf("%d logs created, want none", n)
	}
}

package checkers_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// The Kafka re-read's tests: a kfake broker over TCP, the real Kafka
// source ledgering into Pebble, then the re-read against the broker.
// 3,000 records: past the re-read's chunk (1,024) and the tiles (256).

const rereadRecords = 3000

// kafkaEnv is a broker, a store and the source feeding it.
type kafkaEnv struct {
	t     testing.TB
	c     *kfake.Cluster
	addrs []string
	prod  *kgo.Client
	adm   *kadm.Client
	store *ledger.Store
	cfg   ingest.KafkaConfig
	src   *runningSource
}

type runningSource struct {
	k      *ingest.Kafka
	cancel context.CancelFunc
	done   chan error
	vs     chan ingest.Violation
}

func newKafkaEnv(t testing.TB) *kafkaEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &kafkaEnv{t: t, c: c, addrs: c.ListenAddrs()}
	e.prod, err = kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.prod.Close)
	e.adm = kadm.NewClient(e.prod)
	k := newKey(t)
	e.store, err = ledger.Open(t.TempDir(), k.signer, k.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	e.cfg = ingest.KafkaConfig{Brokers: e.addrs, Topics: []string{"t"}}
	e.createTopic()
	return e
}

func (e *kafkaEnv) createTopic() {
	e.t.Helper()
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, "t"); err != nil {
		e.t.Fatal(err)
	}
}

// records are the test partition's records, every third with an id
// header; changed is the offset whose value differs (-1: none).
func records(n int, changed int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	for i := range out {
		v := fmt.Sprintf(`{"seq":%d}`, i)
		if i == changed {
			v = `{"seq":"rewritten"}`
		}
		r := &kgo.Record{Topic: "t", Key: []byte(fmt.Sprint("k", i%7)), Value: []byte(v), Timestamp: time.Unix(1700000000, 0).UTC()}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprint("evt-", i))}}
		}
		out[i] = r
	}
	return out
}

func (e *kafkaEnv) produce(recs []*kgo.Record) {
	e.t.Helper()
	if err := e.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// recreate deletes the topic and creates it again holding recs.
func (e *kafkaEnv) recreate(recs []*kgo.Record) {
	e.t.Helper()
	if _, err := e.adm.DeleteTopic(context.Background(), "t"); err != nil {
		e.t.Fatal(err)
	}
	e.createTopic()
	e.prod.PurgeTopicsFromClient("t")
	e.produce(recs)
}

func (e *kafkaEnv) start() {
	e.t.Helper()
	s := &runningSource{done: make(chan error, 1), vs: make(chan ingest.Violation, 16)}
	k, err := ingest.NewKafka(e.store, e.cfg, slog.New(slog.DiscardHandler), ingest.WithViolationHandler(func(v ingest.Violation) {
		select {
		case s.vs <- v:
		default:
		}
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	s.k = k
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- k.Run(ctx) }()
	e.src = s
	e.t.Cleanup(e.stop)
}

func (e *kafkaEnv) stop() {
	if s := e.src; s != nil {
		s.cancel()
		if err := <-s.done; err != nil {
			e.t.Errorf("Kafka.Run: %v", err)
		}
		e.src = nil
	}
}

// wait polls cond for up to 3 minutes (the benchmark ledgers 100,000 records).
func wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (e *kafkaEnv) position() *ingest.Position {
	l, err := e.store.Log("t.0")
	if err != nil || l.SourcePosition() == nil {
		return nil
	}
	p, err := ingest.DecodePosition(l.SourcePosition())
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *kafkaEnv) waitNext(next int64) {
	e.t.Helper()
	wait(e.t, fmt.Sprintf("t.0 at offset %d", next), func() bool { p := e.position(); return p != nil && p.Next == next })
}

func (e *kafkaEnv) reread(o checkers.KafkaRereadOptions) *checkers.KafkaReread {
	e.t.Helper()
	o.Logger = slog.New(slog.DiscardHandler)
	c, err := checkers.NewKafkaReread(e.store, e.cfg, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// sourceFindings runs c and returns its findings, failing on an error.
func sourceFindings(t *testing.T, c checkers.Checker) []checkers.Finding {
	t.Helper()
	col := &collector{}
	if err := c.Run(context.Background(), col); err != nil {
		t.Fatalf("%s: %v", c.Name(), err)
	}
	return col.findings
}

// wantMismatchAt checks that fs is exactly one source_mismatch at offset
// (entry index = offset here), plus the source_recreated finding if
// recreated.
func wantMismatchAt(t *testing.T, fs []checkers.Finding, offset int, recreated bool) {
	t.Helper()
	var mism, rec int
	for _, f := range fs {
		switch f.Kind {
		case ledger.IntegritySourceMismatch:
			mism++
			if f.Log != "t.0" || f.Index == nil || *f.Index != uint64(offset) ||
				!strings.Contains(f.Detail, fmt.Sprintf(`topic "t" partition 0 offset %d:`, offset)) {
				t.Errorf("finding %s, want entry %d at offset %d", f, offset, offset)
			}
		case ledger.IntegritySourceRecreated:
			rec++
		default:
			t.Errorf("unexpected finding %s", f)
		}
	}
	if want := map[bool]int{true: 1}[recreated]; mism != 1 || rec != want {
		t.Errorf("%d source_mismatch and %d source_recreated findings %v, want 1 and %d", mism, rec, fs, want)
	}
}

// TestKafkaRereadRecreatedWhileDown: the topic is deleted and recreated
// with one record changed while the source is down. On restart the source
// notices the new topic id and stops the partition; the full re-read, run
// on demand through the Runner, names the changed offset and the topic's
// recreation.
func TestKafkaRereadRecreatedWhileDown(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t)
	e.produce(records(rereadRecords, -1))
	e.start()
	e.waitNext(rereadRecords)
	if fs := sourceFindings(t, e.reread(checkers.KafkaRereadOptions{}).FullPass()); len(fs) != 0 {
		t.Fatalf("findings before the rewrite: %v", fs)
	}
	e.stop()
	const changed = 1777
	e.recreate(records(rereadRecords, changed))

	e.start()
	wait(t, "the source to stop the partition", func() bool {
		err := e.src.k.Ready()
		return err != nil && strings.Contains(err.Error(), "deleted and recreated")
	})
	v := <-e.src.vs
	if v.Log != "t.0" || v.Kind != ledger.IntegritySourceRecreated {
		t.Errorf("violation %+v, want source_recreated of t.0", v)
	}

	sampled := e.reread(checkers.KafkaRereadOptions{})
	full := sampled.FullPass()
	kv, err := e.store.Bucket("checks")
	if err != nil {
		t.Fatal(err)
	}
	r := checkers.NewRunner(kv, checkers.Options{Logger: slog.New(slog.DiscardHandler)})
	for _, c := range []checkers.Checker{sampled, full} {
		if err := r.Register(c, checkers.Schedule{Rate: 50_000}); err != nil {
			t.Fatal(err)
		}
	}
	run, err := r.RunNow(context.Background(), "kafka_reread_full")
	if err != nil || run.Result != checkers.ResultFindings || run.EntriesChecked != rereadRecords {
		t.Fatalf("full pass: %+v, %v; want findings over %d entries", run, err, rereadRecords)
	}
	var st checkers.Status
	for _, s := range r.Status() {
		if s.Name == "kafka_reread_full" {
			st = s
		}
	}
	wantMismatchAt(t, st.Findings, changed, true)
}

// TestKafkaRereadRecreatedWhileRunning: the topic is recreated under the
// running source with one record changed. The source reads the partition
// again (an offset_conflict at the offset, the original leaf kept) and
// records the new topic id; the full re-read names the offset. A sampled
// pass whose windows miss it re-reads it all the same, as a suspect.
func TestKafkaRereadRecreatedWhileRunning(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t)
	e.produce(records(rereadRecords, -1))
	e.start()
	e.waitNext(rereadRecords)
	first := e.position().TopicID
	const changed = 2222
	e.recreate(records(rereadRecords, changed))
	wait(t, "the conflict at the changed offset", func() bool {
		p := e.position()
		return p.Conflicts == 1 && p.TopicID != first
	})
	if p := e.position(); len(p.Conflicted) != 1 || p.Conflicted[0].Offset != changed {
		t.Fatalf("position %+v, want one conflict at offset %d", p, changed)
	}

	sampled := e.reread(checkers.KafkaRereadOptions{Windows: 1, Sample: 100, Rand: func(uint64) uint64 { return 0 }})
	if fs := sourceFindings(t, sampled); len(fs) != 0 {
		t.Fatalf("sampled pass over entries 0-99: %v", fs)
	}
	wantMismatchAt(t, sourceFindings(t, sampled.FullPass()), changed, false)
	wantMismatchAt(t, sourceFindings(t, sampled), changed, false) // the suspect
}

// TestKafkaRereadBrokerDown: a broker that is down when a pass starts, or
// that fails the fetches of a pass, fails the pass with an error and no
// finding.
func TestKafkaRereadBrokerDown(t *testing.T) {
	t.Parallel()
	t.Run("down", func(t *testing.T) {
		t.Parallel()
		e := newKafkaEnv(t)
		e.produce(records(1500, -1))
		e.start()
		e.waitNext(1500)
		e.stop()
		e.c.Close()
		col := &collector{}
		err := e.reread(checkers.KafkaRereadOptions{Timeout: time.Second}).FullPass().Run(context.Background(), col)
		if err == nil || len(col.findings) != 0 {
			t.Fatalf("Run = %v with findings %v, want an error and none", err, col.findings)
		}
	})
	t.Run("fetch fails", func(t *testing.T) {
		t.Parallel()
		e := newKafkaEnv(t)
		e.produce(records(1500, -1))
		e.start()
		e.waitNext(1500)
		e.stop()
		e.c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			e.c.KeepControl()
			req := kreq.(*kmsg.FetchRequest)
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			resp.ErrorCode = kerrCorrupt
			return resp, nil, true
		})
		col := &collector{}
		err := e.reread(checkers.KafkaRereadOptions{Timeout: time.Second}).FullPass().Run(context.Background(), col)
		if err == nil || len(col.findings) != 0 {
			t.Fatalf("Run = %v with findings %v, want an error and none", err, col.findings)
		}
	})
}

// kerrCorrupt is CORRUPT_MESSAGE, an error a fetch does not retry.
const kerrCorrupt = 2

// TestKafkaRereadRetention: records deleted below the log start offset
// (DeleteRecords) are information, counted, not findings; the rest is
// compared.
func TestKafkaRereadRetention(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t)
	e.produce(records(rereadRecords, -1))
	e.start()
	e.waitNext(rereadRecords)
	e.stop()
	const start = 1200
	rs, err := e.adm.DeleteRecords(context.Background(), kadm.Offsets{"t": {0: {Topic: "t", Partition: 0, At: start}}})
	if err != nil || rs.Error() != nil {
		t.Fatalf("delete records: %v %v", err, rs.Error())
	}
	c := e.reread(checkers.KafkaRereadOptions{}).FullPass()
	col := &collector{}
	if err := c.Run(context.Background(), col); err != nil || len(col.findings) != 0 {
		first := ""
		if len(col.findings) > 0 {
			first = col.findings[0].String()
		}
		t.Fatalf("Run = %v, %d findings (first: %s); want none", err, len(col.findings), first)
	}
	if col.entries != rereadRecords-start {
		t.Errorf("%d entries compared, want %d", col.entries, rereadRecords-start)
	}
	got := counts(t, c)
	if got["retention"] != start || got["match"] != rereadRecords-start || got["mismatch"]+got["missing"] != 0 {
		t.Errorf("records by result %v, want retention %d, match %d", got, start, rereadRecords-start)
	}
}

// counts returns checks_kafka_reread_records_total by result.
func counts(t *testing.T, c *checkers.KafkaReread) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

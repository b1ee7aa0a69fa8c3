package ingest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Helpers for the Kafka source's integration tests: a kfake broker on
// loopback, ledger stores in t.TempDir(), a source runner, polling waits
// and exact checks of what a partition's log holds.

// patience bounds every wait for a condition. Generous: the tests run in
// parallel under the race detector, and a consumer group rebalance takes a
// few heartbeats (3 s each).
const patience = 45 * time.Second

// testLogger logs to t while the test runs and drops what comes after (a
// client goroutine may log while the source shuts down).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// waitFor polls cond until it holds, failing the test after patience with
// what describes the state.
func waitFor(t *testing.T, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			s := ""
			if state != nil {
				s = ": " + state()
			}
			t.Fatalf("timed out waiting for %s%s", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// broker is a kfake cluster with a producer and an admin client.
type broker struct {
	t     *testing.T
	c     *kfake.Cluster
	addrs []string
	prod  *kgo.Client
	adm   *kadm.Client
}

// newBroker starts a one-broker kfake cluster; it is closed when the test
// ends. Records are produced to the partition they name.
func newBroker(t *testing.T, opts ...kfake.Opt) *broker {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, c: c, addrs: c.ListenAddrs()}
	t.Cleanup(b.close)
	b.connect()
	return b
}

func (b *broker) connect() {
	b.t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.t.Fatal(err)
	}
	b.prod, b.adm = prod, kadm.NewClient(prod)
}

func (b *broker) close() {
	if b.prod != nil {
		b.prod.Close()
		b.prod = nil
	}
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

// produce writes recs in order and returns them with their offsets set.
func (b *broker) produce(recs ...*kgo.Record) []*kgo.Record {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := b.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.t.Fatalf("produce: %v", err)
	}
	return recs
}

// createTopic creates topic with n partitions through the Kafka protocol.
func (b *broker) createTopic(topic string, n int32) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := b.adm.CreateTopic(ctx, n, 1, nil, topic); err != nil {
		b.t.Fatalf("create topic %s: %v", topic, err)
	}
}

// committed returns the group's committed offset for a partition, or -1.
func (b *broker) committed(group, topic string, part int32) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	os, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		b.t.Fatalf("fetch offsets of group %s: %v", group, err)
	}
	o, ok := os.Lookup(topic, part)
	if !ok {
		return -1
	}
	if o.Err != nil {
		b.t.Fatalf("offset of %s/%d in group %s: %v", topic, part, group, o.Err)
	}
	return o.At
}

// rec builds a record for a partition with a fixed timestamp, so that its
// leaf is the same whoever produces it and whenever.
func rec(topic string, part int32, key, value []byte, headers ...string) *kgo.Record {
	if len(headers)%2 != 0 {
		panic("rec: headers come in name, value pairs")
	}
	r := &kgo.Record{Topic: topic, Partition: part, Key: key, Value: value, Timestamp: time.Unix(1700000000, 0).UTC()}
	for i := 0; i < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

// numbered returns n records for a partition with JSON values naming their
// sequence number from first, every third with an id header.
func numbered(topic string, part int32, first, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		seq := first + i
		var h []string
		if seq%3 == 0 {
			h = []string{"id", fmt.Sprintf("%s-%d-evt-%d", topic, part, seq)}
		}
		recs[i] = rec(topic, part, []byte(fmt.Sprint("k", seq%7)), fmt.Appendf(nil, `{"seq":%d}`, seq), h...)
	}
	return recs
}

// testKeys are one signing key for the stores of a test, so that a store
// can be reopened.
type testKeys struct {
	signer   note.Signer
	verifier note.Verifier
}

func newKeys(t *testing.T) testKeys {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "kafka-test.example")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{s, v}
}

// openStore opens the store in dir (closed when the test ends, if not
// before).
func openStore(t *testing.T, dir string, keys testKeys) *ledger.Store {
	t.Helper()
	s, err := ledger.Open(dir, keys.signer, keys.verifier, ledger.WithCacheSize(4<<20), ledger.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T) *ledger.Store {
	t.Helper()
	return openStore(t, t.TempDir(), newKeys(t))
}

// source is a running Kafka source.
type source struct {
	t      *testing.T
	k      *ingest.Kafka
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	once   sync.Once

	mu         sync.Mutex
	violations []ingest.Violation
}

// startSource runs a Kafka source on store until stop or the end of the
// test. Violations are collected.
func startSource(t *testing.T, store *ledger.Store, cfg ingest.KafkaConfig) *source {
	t.Helper()
	s := &source{t: t, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	// The handler is given at construction: the client joins the group
	// and may assign (and find a violation) before Run.
	k, err := ingest.NewKafka(store, cfg, testLogger(t), ingest.WithViolationHandler(func(v ingest.Violation) {
		s.mu.Lock()
		s.violations = append(s.violations, v)
		s.mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	s.k = k
	for _, c := range k.Collectors() {
		s.reg.MustRegister(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- k.Run(ctx) }()
	t.Cleanup(s.stop)
	return s
}

// stop cancels Run and checks that it returns nil, soon.
func (s *source) stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil {
				s.t.Errorf("Kafka.Run returned %v, want nil", err)
			}
		case <-time.After(patience):
			s.t.Errorf("Kafka.Run did not return within %v of its context ending", patience)
		}
	})
}

// running reports whether Run has not returned.
func (s *source) running() bool {
	select {
	case err := <-s.done:
		s.done <- err
		return false
	default:
		return true
	}
}

func (s *source) seenViolations() []ingest.Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ingest.Violation(nil), s.violations...)
}

// metric returns the value of a metric of the source, for one log if the
// metric has a log label (0 if absent).
func (s *source) metric(name, log string) float64 {
	s.t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := log == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "log" && l.GetValue() == log {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

// assigned reports whether the source consumes the log's partition now.
func (s *source) assigned(log string) bool {
	st, ok := s.k.Status(log)
	return ok && st.Assigned
}

// waitReady waits until Ready returns nil.
func (s *source) waitReady() {
	s.t.Helper()
	waitFor(s.t, "the source to be ready", func() bool { return s.k.Ready() == nil }, func() string { return fmt.Sprint(s.k.Ready()) })
}

// waitNotReady waits until Ready returns an error containing want.
func (s *source) waitNotReady(want string) error {
	s.t.Helper()
	var err error
	waitFor(s.t, fmt.Sprintf("Ready to report an error containing %q", want), func() bool {
		err = s.k.Ready()
		return err != nil && strings.Contains(err.Error(), want)
	}, func() string { return fmt.Sprintf("Ready() = %v", err) })
	return err
}

// logSize is the size of the named log, 0 if it does not exist.
func logSize(store *ledger.Store, name string) uint64 {
	l, err := store.Log(name)
	if err != nil {
		return 0
	}
	return l.Size()
}

// waitNext waits until the named log's position is at next.
func waitNext(t *testing.T, store *ledger.Store, name string, next int64) {
	t.Helper()
	var pos *ingest.Position
	waitFor(t, fmt.Sprintf("log %s to reach offset %d", name, next), func() bool {
		pos = position(t, store, name)
		return pos != nil && pos.Next >= next
	}, func() string { return fmt.Sprintf("position %+v", pos) })
	if pos.Next != next {
		t.Fatalf("log %s is at offset %d, want %d", name, pos.Next, next)
	}
}

// position decodes the named log's source position (nil if none).
func position(t *testing.T, store *ledger.Store, name string) *ingest.Position {
	t.Helper()
	l, err := store.Log(name)
	if errors.Is(err, ledger.ErrLogNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	b := l.SourcePosition()
	if b == nil {
		return nil
	}
	p, err := ingest.DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// entries reads every entry of the named log.
func entries(t *testing.T, store *ledger.Store, name string) []*ledger.Record {
	t.Helper()
	l, err := store.Log(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []*ledger.Record
	if size := l.Size(); size > 0 {
		err = l.Entries(context.Background(), 0, size, func(r *ledger.Record) error {
			out = append(out, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// offsets returns the source offsets of a log's entries, in log order.
func offsets(t *testing.T, recs []*ledger.Record) []int64 {
	t.Helper()
	out := make([]int64, len(recs))
	for i, r := range recs {
		if r.Leaf.Source == nil {
			t.Fatalf("entry %d has no source", i)
		}
		out[i] = r.Leaf.Source.Offset
	}
	return out
}

// checkOffsets checks that the named log holds exactly the offsets want,
// in order, each with the log's topic and partition.
func checkOffsets(t *testing.T, store *ledger.Store, topic string, part int32, want []int64) []*ledger.Record {
	t.Helper()
	name := ingest.LogName(topic, part)
	recs := entries(t, store, name)
	got := offsets(t, recs)
	if len(got) != len(want) {
		t.Fatalf("log %s holds %d entries (offsets %s), want %d (%s)", name, len(got), spans(got), len(want), spans(want))
	}
	for i, r := range recs {
		if s := r.Leaf.Source; s.Topic != topic || s.Partition != part || s.Offset != want[i] || r.Index != uint64(i) {
			t.Fatalf("log %s entry %d: index %d source %+v, want %s/%d/%d", name, i, r.Index, *s, topic, part, want[i])
		}
	}
	return recs
}

// upTo returns the offsets [from, to).
func upTo(from, to int64) []int64 {
	out := []int64{}
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// spans formats offsets as ranges, for failure messages.
func spans(offs []int64) string {
	var b strings.Builder
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(",")
		}
		if i == j {
			fmt.Fprint(&b, offs[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", offs[i], offs[j])
		}
		i = j + 1
	}
	return "[" + b.String() + "]"
}

// wantEntry is what a ledger entry must hold for one Kafka record.
type wantEntry struct {
	id     string
	marks  uint8
	pruned bool // the payload is ledgered by its hash alone
	json   bool
}

// checkEntry checks that the ledger record r holds the Kafka record k
// exactly, with the id, marks and payload form of w.
func checkEntry(t *testing.T, r *ledger.Record, k *kgo.Record, w wantEntry) {
	t.Helper()
	l := &r.Leaf
	at := fmt.Sprintf("%s entry %d (offset %d)", l.Log, r.Index, k.Offset)
	if want := ingest.LogName(k.Topic, k.Partition); l.Log != want {
		t.Errorf("%s: log %q, want %q", at, l.Log, want)
	}
	if s := l.Source; s == nil || *s != (merkle.Source{Topic: k.Topic, Partition: k.Partition, Offset: k.Offset}) {
		t.Errorf("%s: source %+v, want %s/%d/%d", at, s, k.Topic, k.Partition, k.Offset)
	}
	if l.ID != w.id {
		t.Errorf("%s: id %q, want %q", at, l.ID, w.id)
	}
	if l.HasKey != (k.Key != nil) || !bytes.Equal(l.Key, k.Key) {
		t.Errorf("%s: key %v %q, want %v %q", at, l.HasKey, l.Key, k.Key != nil, k.Key)
	}
	if l.Time != k.Timestamp.UnixNano() || l.TimeAssigned {
		t.Errorf("%s: time %d (assigned %v), want %d", at, l.Time, l.TimeAssigned, k.Timestamp.UnixNano())
	}
	if len(l.Headers) != len(k.Headers) {
		t.Errorf("%s: %d headers %q, want %d %q", at, len(l.Headers), l.Headers, len(k.Headers), k.Headers)
	} else {
		for i, h := range k.Headers {
			if l.Headers[i].Key != h.Key || !bytes.Equal(l.Headers[i].Value, h.Value) {
				t.Errorf("%s: header %d is %q=%q, want %q=%q", at, i, l.Headers[i].Key, l.Headers[i].Value, h.Key, h.Value)
			}
		}
	}
	if l.Marks != w.marks {
		t.Errorf("%s: marks %v, want %v", at, merkle.MarkNames(l.Marks), merkle.MarkNames(w.marks))
	}
	if l.PayloadSHA256 != merkle.Hash(sha256.Sum256(k.Value)) {
		t.Errorf("%s: payload hash %x, want the SHA-256 of the value", at, l.PayloadSHA256)
	}
	if r.PayloadPruned != w.pruned {
		t.Errorf("%s: payload pruned %v, want %v", at, r.PayloadPruned, w.pruned)
	}
	switch {
	case w.pruned && r.Payload != nil:
		t.Errorf("%s: %d payload bytes stored, want none", at, len(r.Payload))
	case !w.pruned && !bytes.Equal(r.Payload, k.Value):
		t.Errorf("%s: payload %q, want %q", at, r.Payload, k.Value)
	}
	if r.PayloadJSON != w.json {
		t.Errorf("%s: payload JSON %v, want %v", at, r.PayloadJSON, w.json)
	}
	lb, err := l.MarshalBinary()
	if err != nil || !bytes.Equal(lb, r.LeafBytes) || merkle.LeafHash(lb) != r.LeafHash {
		t.Errorf("%s: leaf bytes and hash do not match the leaf (%v)", at, err)
	}
}

// positionID is the id the source gives a record without an id header.
func positionID(topic string, part int32, off int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, part, off)
}

// equalPositions compares two positions field by field.
func equalPositions(a, b *ingest.Position) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Topic == b.Topic && a.Partition == b.Partition && a.Next == b.Next &&
		a.GapOffsets == b.GapOffsets && a.GapCount == b.GapCount && slices.Equal(a.Gaps, b.Gaps) &&
		a.Conflicts == b.Conflicts && slices.Equal(a.Conflicted, b.Conflicted)
}

// numberedWant is the entry a record of numbered becomes.
func numberedWant(r *kgo.Record) wantEntry {
	w := wantEntry{id: positionID(r.Topic, r.Partition, r.Offset), json: true}
	for _, h := range r.Headers {
		if h.Key == "id" {
			w.id = string(h.Value)
		}
	}
	return w
}

// waitConflicts waits until the named log's position records n conflicts.
func waitConflicts(t *testing.T, store *ledger.Store, name string, n int64) {
	t.Helper()
	var pos *ingest.Position
	waitFor(t, fmt.Sprintf("%d conflicts in %s", n, name), func() bool {
		pos = position(t, store, name)
		return pos != nil && pos.Conflicts >= n
	}, func() string { return fmt.Sprintf("position %+v", pos) })
}

// leafHash is the hash of the leaf a record with the given id becomes
// (no marks).
func leafHash(t *testing.T, r *kgo.Record, id string) merkle.Hash {
	t.Helper()
	l := merkle.Leaf{Log: ingest.LogName(r.Topic, r.Partition), ID: id, HasKey: r.Key != nil, Key: r.Key, Time: r.Timestamp.UnixNano(),
		Source: &merkle.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}, PayloadSHA256: sha256.Sum256(r.Value)}
	for _, h := range r.Headers {
		l.Headers = append(l.Headers, merkle.Header{Key: h.Key, Value: h.Value})
	}
	h, err := l.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

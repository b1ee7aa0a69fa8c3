package checkers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/ledger"
)

// KafkaReread is the Kafka source re-read: for each log fed by a Kafka
// partition it reads ranges of the partition again from the brokers, with
// a client of its own (direct partition reads, no consumer group), and
// compares each record with the leaf the log holds for its offset, by leaf
// hash, recomputed from the record as the source builds it
// (ingest.RecordLeaf). It also compares the topic id the log recorded with
// the brokers' current one.
//
// Findings, each naming the topic, partition and offset:
//   - source_mismatch: a record whose leaf differs from the log's at its
//     offset, or a record at an offset the log skipped as a gap;
//   - source_missing: an offset the log holds that the partition's
//     retained range (log start offset to high watermark) does not, on a
//     topic that is not compacted, or beyond the partition's end;
//   - source_recreated: the topic's id changed since the log recorded it.
//
// Records gone by retention (below the partition's log start offset) or
// compaction (absent on a topic whose cleanup.policy compacts) are
// information: counted in checks_kafka_reread_records_total and logged, not
// findings. A broker that is down, does not answer within the timeout or
// answers an error makes the pass fail (a checker error), never a finding.
//
// A sampled pass (the default) re-reads a few random windows of each log
// and the entries earlier passes found wrong; the full pass (FullPass, the
// checker kafka_reread_full, run on demand) re-reads every retained offset.
type KafkaReread struct {
	store *ledger.Store
	cfg   ingest.KafkaConfig
	conn  []kgo.Opt
	o     KafkaRereadOptions
	full  bool
	log   *slog.Logger
	m     *rereadMetrics
	sus   *suspects
}

var _ Checker = (*KafkaReread)(nil)

// KafkaRereadOptions configure a KafkaReread. The zero value is usable.
type KafkaRereadOptions struct {
	// Windows and Sample shape a sampled pass: Windows windows of Sample
	// consecutive entries at random places of each log (default 4 of
	// 1000). A log with no more entries than that is re-read in full.
	Windows, Sample int
	// Timeout bounds each request to the brokers and each wait for
	// records (default 30s).
	Timeout time.Duration
	Logger  *slog.Logger
	// Rand returns a number in [0, n) for placing windows (default
	// math/rand/v2).
	Rand func(n uint64) uint64
}

// NewKafkaReread returns the sampled re-read of the logs store's Kafka
// source (configured by cfg) feeds.
func NewKafkaReread(store *ledger.Store, cfg ingest.KafkaConfig, o KafkaRereadOptions) (*KafkaReread, error) {
	if o.Windows <= 0 {
		o.Windows = 4
	}
	if o.Sample <= 0 {
		o.Sample = 1000
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64N
	}
	conn, err := cfg.ClientOpts(o.Logger)
	if err != nil {
		return nil, fmt.Errorf("kafka re-read: %w", err)
	}
	return &KafkaReread{store: store, cfg: cfg, conn: conn, o: o, log: o.Logger, m: newRereadMetrics(), sus: &suspects{m: map[string]map[uint64]bool{}}}, nil
}

// FullPass returns the full re-read, which shares c's metrics and the
// entries found wrong (a sampled pass re-reads those the full pass found).
func (c *KafkaReread) FullPass() *KafkaReread {
	f := *c
	f.full = true
	return &f
}

// Name implements Checker: kafka_reread, or kafka_reread_full.
func (c *KafkaReread) Name() string {
	if c.full {
		return "kafka_reread_full"
	}
	return "kafka_reread"
}

// Collectors returns the re-read's collectors (shared with its FullPass):
// checks_kafka_reread_records_total{checker,result}, result one of match,
// mismatch, missing, retention, compacted.
func (c *KafkaReread) Collectors() []prometheus.Collector { return []prometheus.Collector{c.m.records} }

// rereadLog is a Kafka-fed log as a pass finds it.
type rereadLog struct {
	name string
	l    *ledger.Log
	pos  *ingest.Position
	size uint64 // taken before the brokers' offsets, so it is not ahead of them
}

// Run implements Checker.
func (c *KafkaReread) Run(ctx context.Context, p Progress) error {
	logs := c.kafkaLogs()
	if len(logs) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(c.conn...)
	if err != nil {
		return fmt.Errorf("kafka re-read: %w", err)
	}
	defer cl.Close()
	var topics []string
	for _, rl := range logs {
		if !slices.Contains(topics, rl.pos.Topic) {
			topics = append(topics, rl.pos.Topic)
		}
	}
	st, err := c.brokerState(ctx, kadm.NewClient(cl), topics)
	if err != nil {
		return fmt.Errorf("kafka re-read: %w", err)
	}
	for _, rl := range logs {
		if err := c.rereadLog(ctx, p, rl, st); err != nil {
			return fmt.Errorf("kafka re-read: %s (topic %q partition %d): %w", rl.name, rl.pos.Topic, rl.pos.Partition, err)
		}
	}
	return nil
}

// kafkaLogs returns the logs whose source position is a Kafka partition's.
func (c *KafkaReread) kafkaLogs() []rereadLog {
	var out []rereadLog
	for _, li := range c.store.Logs() {
		l, err := c.store.Log(li.Name)
		if err != nil {
			continue
		}
		b := l.SourcePosition()
		if b == nil {
			continue
		}
		pos, err := ingest.DecodePosition(b)
		if err != nil || pos.Topic == "" {
			continue
		}
		out = append(out, rereadLog{name: li.Name, l: l, pos: pos, size: l.Size()})
	}
	return out
}

// partState is what the brokers say of one partition at the start of a
// pass.
type partState struct {
	start, end int64 // log start offset and high watermark
}

// topicState is what the brokers say of one topic.
type topicState struct {
	exists    bool
	id        string // ingest.TopicIDString form; "" if the broker has none
	compacted bool
	parts     map[int32]partState
}

// brokerState reads the topics' ids, partitions' offsets and cleanup
// policies. Any error, a topic that does not exist aside, is the pass's.
func (c *KafkaReread) brokerState(ctx context.Context, adm *kadm.Client, topics []string) (map[string]*topicState, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := map[string]*topicState{}
	var live []string
	for _, t := range topics {
		ts := &topicState{parts: map[int32]partState{}}
		out[t] = ts
		d, ok := md.Topics[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			continue
		case d.Err != nil:
			return nil, fmt.Errorf("metadata of topic %q: %w", t, d.Err)
		}
		ts.exists, ts.id = true, ingest.TopicIDString(d.ID)
		live = append(live, t)
	}
	if len(live) == 0 {
		return out, nil
	}
	starts, err := adm.ListStartOffsets(ctx, live...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, live...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	for _, t := range live {
		for part, s := range starts[t] {
			e, ok := ends.Lookup(t, part)
			if s.Err != nil || !ok || e.Err != nil {
				return nil, fmt.Errorf("offsets of %s/%d: %w", t, part, errors.Join(s.Err, e.Err))
			}
			out[t].parts[part] = partState{start: s.Offset, end: e.Offset}
		}
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, live...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	for _, rc := range cfgs {
		if rc.Err != nil {
			return nil, fmt.Errorf("config of topic %q: %w", rc.Name, rc.Err)
		}
		for _, kv := range rc.Configs {
			if kv.Key == "cleanup.policy" && kv.Value != nil && strings.Contains(*kv.Value, "compact") {
				if ts := out[rc.Name]; ts != nil {
					ts.compacted = true
				}
			}
		}
	}
	return out, nil
}

// rereadLog re-reads one log's partition: its topic id, then its windows.
func (c *KafkaReread) rereadLog(ctx context.Context, p Progress, rl rereadLog, st map[string]*topicState) error {
	ts := st[rl.pos.Topic]
	if ts == nil || !ts.exists {
		c.m.add(c.Name(), resultRetention, rl.size)
		c.log.Info("kafka re-read: the topic no longer exists; nothing to compare", "log", rl.name, "topic", rl.pos.Topic, "entries", rl.size)
		return nil
	}
	if rl.pos.TopicID != "" && ts.id != "" && rl.pos.TopicID != ts.id {
		p.Found(Finding{Log: rl.name, Kind: ledger.IntegritySourceRecreated, Detail: fmt.Sprintf(
			"topic %q was deleted and recreated: the log recorded topic id %s, the brokers have %s", rl.pos.Topic, rl.pos.TopicID, ts.id)})
	}
	ps, ok := ts.parts[rl.pos.Partition]
	if !ok {
		return fmt.Errorf("the brokers list no partition %d of topic %q", rl.pos.Partition, rl.pos.Topic)
	}
	if rl.size == 0 {
		return nil
	}
	first, err := firstAtOrAbove(rl.l, rl.size, ps.start)
	if err != nil {
		return err
	}
	c.m.add(c.Name(), resultRetention, first)
	w := &logReread{c: c, p: p, rl: rl, ps: ps, compacted: ts.compacted}
	defer w.close()
	for _, win := range c.windows(rl.name, first, rl.size) {
		if err := w.window(ctx, win[0], win[1]); err != nil {
			return err
		}
	}
	c.log.Info("kafka re-read of a partition done", "checker", c.Name(), "log", rl.name, "topic", rl.pos.Topic, "partition", rl.pos.Partition,
		"log_start_offset", ps.start, "high_watermark", ps.end, "entries_below_log_start", first,
		"compared", w.n[resultMatch]+w.n[resultMismatch], "mismatched", w.n[resultMismatch], "missing", w.n[resultMissing],
		"gone_by_retention", w.n[resultRetention], "compacted", w.n[resultCompacted])
	return nil
}

// firstAtOrAbove returns the index of l's first entry (below size) read
// from an offset at or above off, by binary search: a partition's log holds
// its records in offset order.
func firstAtOrAbove(l *ledger.Log, size uint64, off int64) (uint64, error) {
	var ferr error
	i := sort.Search(int(size), func(i int) bool {
		if ferr != nil {
			return true
		}
		rec, err := l.Entry(uint64(i))
		if err != nil {
			ferr = err
			return true
		}
		return rec.Leaf.Source == nil || rec.Leaf.Source.Offset >= off
	})
	if ferr != nil {
		return 0, fmt.Errorf("read the log: %w", ferr)
	}
	return uint64(i), nil
}

// windows returns the index ranges [lo, hi) of a log to re-read, in order
// and disjoint: all of [first, size) for a full pass or a small log, else
// Windows random windows of Sample entries and the entries found wrong
// before.
func (c *KafkaReread) windows(log string, first, size uint64) [][2]uint64 {
	n := size - first
	if c.full || n <= uint64(c.o.Windows*c.o.Sample) {
		return [][2]uint64{{first, size}}
	}
	var ws [][2]uint64
	for range c.o.Windows {
		lo := first + c.o.Rand(n-uint64(c.o.Sample)+1)
		ws = append(ws, [2]uint64{lo, lo + uint64(c.o.Sample)})
	}
	for _, i := range c.sus.of(log) {
		if i >= first && i < size {
			ws = append(ws, [2]uint64{i, i + 1})
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i][0] < ws[j][0] })
	out := ws[:1]
	for _, w := range ws[1:] {
		last := &out[len(out)-1]
		if w[0] <= last[1] {
			last[1] = max(last[1], w[1])
			continue
		}
		out = append(out, w)
	}
	return out
}

// suspects are the entries re-reads found wrong, by log, re-read by every
// sampled pass until they compare equal (kept in memory: a restart forgets
// them, the alerts they raised stay until a full pass resolves them).
type suspects struct {
	mu sync.Mutex
	m  map[string]map[uint64]bool
}

func (s *suspects) set(log string, index uint64, bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case bad && s.m[log] == nil:
		s.m[log] = map[uint64]bool{index: true}
	case bad:
		if len(s.m[log]) < MaxFindings {
			s.m[log][index] = true
		}
	default:
		delete(s.m[log], index)
	}
}

func (s *suspects) of(log string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, 0, len(s.m[log]))
	for i := range s.m[log] {
		out = append(out, i)
	}
	return out
}

// Results of comparing a log's entry with its partition (the result label
// of checks_kafka_reread_records_total).
const (
	resultMatch     = "match"     // the record gives the entry's leaf
	resultMismatch  = "mismatch"  // it does not, or a record the log skipped
	resultMissing   = "missing"   // absent inside the retained range, not compacted
	resultRetention = "retention" // below the log start offset: information
	resultCompacted = "compacted" // absent on a compacted topic: information
)

type rereadMetrics struct{ records *prometheus.CounterVec }

func newRereadMetrics() *rereadMetrics {
	return &rereadMetrics{records: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "checks_kafka_reread_records_total",
		Help: "Log entries the Kafka re-read compared with their partition, by checker and result: match, mismatch and missing (findings), retention and compacted (gone from the broker: information).",
	}, []string{"checker", "result"})}
}

func (m *rereadMetrics) add(checker, result string, n uint64) {
	if n > 0 {
		m.records.WithLabelValues(checker, result).Add(float64(n))
	}
}

// FindingKinds are the kinds a re-read reports.
func (c *KafkaReread) FindingKinds() []string {
	return []string{ledger.IntegritySourceMismatch, ledger.IntegritySourceMissing, ledger.IntegritySourceRecreated}
}

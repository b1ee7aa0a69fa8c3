package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Violation is an integrity violation the source found.
type Violation struct {
	Log      string
	Kind     string // "offset_conflict"
	Offset   int64
	Index    uint64
	LeafHash merkle.Hash
	Detail   string
}

// Kafka consumes topic partitions into ledger logs, one log per partition,
// exactly once: each partition's position is committed with its entries,
// consumption resumes from there, and re-delivered records never add a leaf.
type Kafka struct {
	cfg   KafkaConfig
	store *ledger.Store
	log   *slog.Logger
	m     *kafkaMetrics
	opts  []kgo.Opt    // of the consuming client, to make a new one
	gen   atomic.Int64 // of the current consuming client (newClient)

	// The consuming client (in the consumer group) is replaced when the
	// source restarts its consumer; the Run goroutine owns it, the others
	// read it through client. The admin client, outside the group, checks
	// the brokers and reads end offsets.
	clMu  sync.Mutex
	cl    *kgo.Client
	admCl *kgo.Client
	adm   *kadm.Client
	// restart asks Run for a new consuming client; it carries why.
	restart chan string

	// onViolation is told of each integrity violation (WithViolationHandler).
	onViolation func(Violation)

	mu    sync.Mutex
	parts map[string]*partition // by log name, while assigned
	hwm   map[string]int64      // latest high watermark seen, by log name
	// reread holds the logs whose topic was deleted and recreated: their
	// partition is read from its first offset when next assigned, until it
	// has caught up with the log, so every offset is compared with its leaf.
	reread map[string]bool

	health sync.Mutex
	status error // nil when the brokers answer and the topics exist
	// failed holds partitions stopped on an error until a restart (a log
	// that cannot take their records); Ready reports them.
	failed map[string]error
	// joined says the consuming client is in its group with an assignment
	// (possibly empty); outSince is when it last was not.
	joined   bool
	outSince time.Time
	// stalled are the assigned partitions stalled at the latest check.
	stalled []stall
	// unconsumed are the partitions of the consumed topics that no member
	// of the group consumed at the latest check, with when each was first
	// seen so (checkConsumed).
	unconsumed map[string]time.Time
	checkedAt  time.Time // of the latest checkConsumed
	// patterns are the topics as regular expressions (TopicRegex).
	patterns []*regexp.Regexp
}

// A KafkaOption configures a Kafka source.
type KafkaOption func(*Kafka)

// WithViolationHandler has f told of each integrity violation the source
// finds (offset conflicts, a recreated topic). It is set before the client
// exists: a violation found at the first assignment, which can come before
// Run, is not lost.
func WithViolationHandler(f func(Violation)) KafkaOption {
	return func(k *Kafka) { k.onViolation = f }
}

// NewKafka returns a Kafka source feeding store. Run starts it.
func NewKafka(store *ledger.Store, cfg KafkaConfig, logger *slog.Logger, options ...KafkaOption) (*Kafka, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	k := &Kafka{cfg: cfg, store: store, log: logger, m: newKafkaMetrics(), parts: map[string]*partition{}, hwm: map[string]int64{}, reread: map[string]bool{}, failed: map[string]error{},
		status: errors.New("kafka: not connected yet"), restart: make(chan string, 1), outSince: time.Now()}
	for _, o := range options {
		o(k)
	}
	if cfg.TopicRegex {
		patterns, err := cfg.topicPatterns()
		if err != nil {
			return nil, err
		}
		k.patterns = patterns
	}
	conn, err := cfg.ClientOpts(logger)
	if err != nil {
		return nil, err
	}
	opts := append(slices.Clip(conn),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.FetchMaxBytes(cfg.FetchMaxBytes),
		kgo.MaxConcurrentFetches(4),
		// Transaction markers come with the records, so that a partition
		// whose last offsets are markers is seen to be read to its end
		// (they are not ledgered: they are gaps).
		kgo.KeepControlRecords(),
		// Only marked offsets are committed: append marks a partition's
		// records once they are durable in its log, so the group's offset
		// follows the ledger. (With DisableAutoCommit, MarkCommitRecords
		// and CommitMarkedOffsets do nothing.)
		kgo.AutoCommitMarks(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		// At most a third of the session, as Kafka advises (franz-go's
		// default is 3s).
		kgo.HeartbeatInterval(min(3*time.Second, cfg.SessionTimeout/3)),
		// New partitions of the topics (and new topics matching a
		// pattern) are found when the metadata is re-read, and only the
		// group's leader rebalances for them: franz-go re-reads every 5
		// minutes by default, which left an added partition unconsumed
		// that long (issue 26).
		kgo.MetadataMaxAge(cfg.MetadataRefresh),
		kgo.MetadataMinAge(min(5*time.Second, cfg.MetadataRefresh)),
	)
	if cfg.TopicRegex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if id := cfg.staticInstanceID(); id != "" {
		opts = append(opts, kgo.InstanceID(id))
	}
	adm, err := kgo.NewClient(conn...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	k.opts = opts
	// The admin client first: the consuming one joins its group at once,
	// and its callbacks read topic ids through k.adm.
	k.admCl, k.adm = adm, kadm.NewClient(adm)
	cl, err := k.newClient()
	if err != nil {
		adm.Close()
		return nil, fmt.Errorf("kafka: %w", err)
	}
	k.clMu.Lock()
	k.cl = cl
	k.clMu.Unlock()
	return k, nil
}

// newClient returns a new consuming client. Its group callbacks act only
// while it is the current one: an old client still closing (a join in
// flight) must not touch the partitions of its successor.
func (k *Kafka) newClient() (*kgo.Client, error) {
	gen := k.gen.Add(1)
	cur := func() bool { return k.gen.Load() == gen }
	return kgo.NewClient(append(slices.Clip(k.opts),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, m map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			if !cur() {
				return m, nil
			}
			return k.adjustOffsets(ctx, m)
		}),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if cur() {
				k.assigned(ctx, cl, m)
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if cur() {
				k.revoked(ctx, cl, m)
			}
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if cur() {
				k.lost(ctx, cl, m)
			}
		}),
	)...)
}

// client returns the consuming client.
func (k *Kafka) client() *kgo.Client {
	k.clMu.Lock()
	defer k.clMu.Unlock()
	return k.cl
}

// Run consumes until ctx ends, then finishes the batches in hand, commits
// the group offsets and closes the client. Broker outages do not end it: the
// client retries with backoff and Ready reports the outage. A consumer that
// stalls or stays out of its group is replaced by a new one (see
// KafkaConfig.StallWindow).
func (k *Kafka) Run(ctx context.Context) error {
	var watchers sync.WaitGroup
	defer func() {
		watchers.Wait()
		k.admCl.Close()
	}()
	watchers.Add(2)
	go func() { defer watchers.Done(); k.watchHealth(ctx) }()
	go func() { defer watchers.Done(); k.watchProgress(ctx) }()
	for {
		why := k.consume(ctx, k.client())
		k.closeConsumer()
		if ctx.Err() != nil {
			return nil
		}
		k.m.restarts.Inc()
		k.log.Warn("kafka: restarting the consumer", "why", why, "group", k.cfg.Group, "instance_id", k.cfg.staticInstanceID())
		cl, err := k.newClient()
		if err != nil { // the options were accepted before: not expected
			return fmt.Errorf("kafka: new client: %w", err)
		}
		k.clMu.Lock()
		k.cl = cl
		k.clMu.Unlock()
		select {
		case <-k.restart: // asked again while the old one closed
		default:
		}
	}
}

// consume polls cl and hands the records to their partitions until ctx ends
// or a restart is asked for; it returns why it stopped.
func (k *Kafka) consume(ctx context.Context, cl *kgo.Client) string {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	why := make(chan string, 1)
	go func() {
		select {
		case w := <-k.restart:
			why <- w
			cancel()
		case <-pctx.Done():
			why <- "shutdown"
		}
	}()
	for {
		fetches := cl.PollRecords(pctx, 4*k.cfg.BatchRecords)
		if fetches.IsClientClosed() || pctx.Err() != nil {
			// Records in hand are dropped: the next client, if any,
			// resumes from the ledger's positions.
			cl.AllowRebalance()
			cancel()
			return <-why
		}
		polled := time.Now()
		var recreated map[string][]int32
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if errors.Is(err, kerr.UnknownTopicID) && topic != "" {
				// The client returns this only once it persists: the
				// topic was deleted (and maybe recreated). The client
				// refuses a new topic under the old name until it is
				// purged, so without this the partition stalls for good.
				if recreated == nil {
					recreated = map[string][]int32{}
				}
				recreated[topic] = append(recreated[topic], p)
				return
			}
			k.m.fetchErrors.Inc()
			k.log.Warn("kafka fetch error", "topic", topic, "partition", p, "err", err)
			var ge *kgo.ErrGroupSession
			if errors.As(err, &ge) {
				// Not a broker outage: the group session ended or could
				// not begin. onLost has cleared joined; Ready says so.
				return
			}
			k.setStatus(fmt.Errorf("kafka: fetch %s/%d: %w", topic, p, err))
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			name := LogName(fp.Topic, fp.Partition)
			k.mu.Lock()
			p := k.parts[name]
			k.hwm[name] = fp.HighWatermark
			k.mu.Unlock()
			if p == nil {
				// Not assigned (revoked since the fetch): the next owner
				// reads these records again from the ledger's position.
				return
			}
			if len(fp.Records) == 0 {
				p.updateLag(fp.HighWatermark)
				return
			}
			b := batch{recs: fp.Records, hwm: fp.HighWatermark, polled: polled, end: fp.Records[len(fp.Records)-1].Offset + 1}
			if hasControl(b.recs) {
				b.recs = slices.DeleteFunc(slices.Clone(b.recs), func(r *kgo.Record) bool { return r.Attrs.IsControl() })
			}
			// Blocks when the partition's queue is full: that is the flow
			// control. The client stops fetching once its buffer is full.
			select {
			case p.in <- b:
			case <-pctx.Done():
			}
		})
		cl.AllowRebalance()
		for topic, parts := range recreated {
			k.recreated(cl, topic, parts)
		}
	}
}

func hasControl(recs []*kgo.Record) bool {
	for _, r := range recs {
		if r.Attrs.IsControl() {
			return true
		}
	}
	return false
}

// closeConsumer finishes the assigned partitions' batches in hand, commits
// the group offsets and closes the consuming client. A static member does
// not leave its group on close: its next client (or the next run of the
// daemon) takes its place.
func (k *Kafka) closeConsumer() {
	cl := k.client()
	k.mu.Lock()
	parts := make([]*partition, 0, len(k.parts))
	for _, p := range k.parts {
		parts = append(parts, p)
	}
	k.parts = map[string]*partition{}
	k.mu.Unlock()
	for _, p := range parts {
		p.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		k.log.Warn("kafka: group offsets not committed on closing the consumer", "err", err)
	}
	k.gen.Add(1) // the client's callbacks do nothing from here on
	k.setJoined(false)
	// Close waits for a join or sync in flight, which a coordinator that
	// does not answer holds for the rebalance timeout and more: do not
	// wait that long for a client that is being replaced.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		cl.Close()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		k.log.Warn("kafka: the old consumer is still closing (a group request in flight); going on without it")
	}
}

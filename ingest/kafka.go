package ingest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// KafkaConfig configures the Kafka source.
type KafkaConfig struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string `yaml:"brokers"`
	// Topics to consume. With TopicRegex, each is a regular expression.
	Topics     []string `yaml:"topics"`
	TopicRegex bool     `yaml:"topic_regex"`
	// Group is the consumer group (default "auditd"). Instances in one
	// group split the partitions; each partition's ledger resumes from its
	// own recorded position, whatever offset the group has committed.
	Group string `yaml:"group"`
	// IDHeader names the record header holding the event id (default
	// "id"). A record without it gets the id "<topic>/<partition>/<offset>".
	IDHeader string `yaml:"id_header"`
	// MaxRecordBytes bounds the value ledgered with a record (default
	// 1 MiB); a larger value is ledgered by its SHA-256 alone and marked
	// oversize.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// BatchRecords bounds the records appended in one ledger request per
	// partition (default 4096).
	BatchRecords int `yaml:"batch_records"`
	// FetchMaxBytes bounds one fetch response (default 16 MiB); with the
	// per-partition queues it bounds the memory the source holds.
	FetchMaxBytes int32      `yaml:"fetch_max_bytes"`
	TLS           *KafkaTLS  `yaml:"tls"`
	SASL          *KafkaSASL `yaml:"sasl"`
	// ClientID is sent to the brokers (default "auditd").
	ClientID string `yaml:"client_id"`
	// SessionTimeout is how long the group waits for a member that stopped
	// answering before it gives the member's partitions to others (default
	// 45s, Kafka's). A dynamic member killed and restarted gets its
	// partitions back only after it; a static one (InstanceID) at once.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// InstanceID makes this instance a static group member (KIP-345): a
	// restart with the same id replaces its previous incarnation in the
	// group at once and keeps its partitions, without waiting out the
	// session timeout of the member it was. It must be unique per instance:
	// two members with one id fence each other. Empty or "none": a dynamic
	// member. (auditd serve derives a default from the signing key and the
	// data directory.)
	InstanceID string `yaml:"instance_id"`
	// StallWindow is how long an assigned partition with records to read
	// may go without progress before it counts as stalled (default 30s).
	// A stalled partition, or a source that has not been in its group for
	// this long, makes the source not ready and restarts its consumer.
	StallWindow time.Duration `yaml:"stall_window"`
}

// staticInstanceID is the group instance id to join with, "" for a dynamic
// member.
func (c *KafkaConfig) staticInstanceID() string {
	if c.InstanceID == "none" {
		return ""
	}
	return c.InstanceID
}

// KafkaTLS enables TLS to the brokers.
type KafkaTLS struct {
	// CAFile is a PEM bundle of CAs to trust (default: the system's).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate, for mutual TLS.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the broker's certificate.
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// KafkaSASL authenticates to the brokers.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password; ${VAR} is expanded from the environment.
	Password string `yaml:"password"`
}

func (c *KafkaConfig) setDefaults() {
	if c.Group == "" {
		c.Group = "auditd"
	}
	if c.IDHeader == "" {
		c.IDHeader = "id"
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = 1 << 20
	}
	if c.BatchRecords <= 0 {
		c.BatchRecords = 4096
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = 16 << 20
	}
	if c.ClientID == "" {
		c.ClientID = "auditd"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 45 * time.Second
	}
	if c.StallWindow <= 0 {
		c.StallWindow = 30 * time.Second
	}
}

// Validate reports a configuration the source cannot run with.
func (c *KafkaConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka: no brokers")
	case len(c.Topics) == 0:
		return errors.New("kafka: no topics")
	}
	if s := c.SASL; s != nil {
		switch s.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return fmt.Errorf("kafka: unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
		}
	}
	return nil
}

// LogName is the ledger log a topic partition feeds.
func LogName(topic string, partition int32) string {
	return topic + "." + strconv.Itoa(int(partition))
}

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

	// OnViolation, if set before Run, is told of each integrity violation.
	OnViolation func(Violation)

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
}

// stall is a partition with records to read and no progress.
type stall struct {
	log   string
	lag   int64
	since time.Time
}

// NewKafka returns a Kafka source feeding store. Run starts it.
func NewKafka(store *ledger.Store, cfg KafkaConfig, logger *slog.Logger) (*Kafka, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	k := &Kafka{cfg: cfg, store: store, log: logger, m: newKafkaMetrics(), parts: map[string]*partition{}, hwm: map[string]int64{}, reread: map[string]bool{}, failed: map[string]error{},
		status: errors.New("kafka: not connected yet"), restart: make(chan string, 1), outSince: time.Now()}
	conn := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(kgoLogger{logger}),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			d := 100 * time.Millisecond << min(tries, 6)
			return min(d, 5*time.Second)
		}),
	}
	if cfg.TLS != nil {
		tc, err := cfg.TLS.config()
		if err != nil {
			return nil, err
		}
		conn = append(conn, kgo.DialTLSConfig(tc))
	}
	if s := cfg.SASL; s != nil {
		conn = append(conn, kgo.SASL(s.mechanism()))
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
	cl, err := k.newClient()
	if err != nil {
		adm.Close()
		return nil, fmt.Errorf("kafka: %w", err)
	}
	k.cl, k.admCl, k.adm = cl, adm, kadm.NewClient(adm)
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

// kgoLogger passes the Kafka client's warnings and errors to slog (its info
// and debug lines are too many to keep).
type kgoLogger struct{ l *slog.Logger }

func (g kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (g kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	g.l.Log(context.Background(), lv, "kafka client: "+msg, keyvals...)
}

func (t *KafkaTLS) config() (*tls.Config, error) {
	c := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka tls: no certificates in %s", t.CAFile)
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func (s *KafkaSASL) mechanism() sasl.Mechanism {
	pass := os.ExpandEnv(s.Password)
	switch s.Mechanism {
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism()
	default:
		return plain.Auth{User: s.Username, Pass: pass}.AsMechanism()
	}
}

// Collectors returns the source's Prometheus collectors.
func (k *Kafka) Collectors() []prometheus.Collector { return k.m.collectors() }

// Ready returns nil when the brokers answer, the configured topics exist,
// the source is in its consumer group with an assignment (an empty one
// counts: another member has the partitions), and every assigned partition
// has either nothing to read or made progress within the stall window.
func (k *Kafka) Ready() error {
	k.health.Lock()
	defer k.health.Unlock()
	if k.status != nil {
		return k.status
	}
	names := make([]string, 0, len(k.failed))
	for n := range k.failed {
		names = append(names, n)
	}
	if len(names) > 0 {
		sort.Strings(names)
		return fmt.Errorf("kafka: partition %s stopped: %w", names[0], k.failed[names[0]])
	}
	if !k.joined {
		return fmt.Errorf("kafka: not in consumer group %q (joining since %s)", k.cfg.Group, time.Since(k.outSince).Round(time.Second))
	}
	if len(k.stalled) > 0 {
		return stalledError(k.stalled, k.cfg.StallWindow)
	}
	return nil
}

func stalledError(ss []stall, window time.Duration) error {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (lag %d, no progress for %s)", s.log, s.lag, time.Since(s.since).Round(time.Second))
	}
	return fmt.Errorf("kafka: partitions stalled, records to read and no progress within %s: %s", window, b.String())
}

// fail stops consuming a partition until a restart and keeps the source
// not ready, with a clear log line.
func (k *Kafka) fail(log string, err error) {
	k.health.Lock()
	k.failed[log] = err
	k.health.Unlock()
	k.m.ready.Set(0)
	k.log.Error("kafka partition stopped until restart", "log", log, "err", err)
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

// recreated handles a topic that was deleted and maybe recreated: it
// purges the topic from the client and subscribes to it again. The
// partitions this instance held are then read from their first offset, so
// that a record written again at an offset a log holds is compared with the
// leaf there (a conflict if it differs).
func (k *Kafka) recreated(cl *kgo.Client, topic string, parts []int32) {
	k.log.Warn("kafka topic deleted or recreated: consuming it again from its first offset", "topic", topic, "partitions", parts)
	k.setStatus(fmt.Errorf("kafka: topic %q was deleted or recreated", topic))
	k.mu.Lock()
	for _, p := range parts {
		k.reread[LogName(topic, p)] = true
	}
	k.mu.Unlock()
	cl.PurgeTopicsFromClient(topic)
	if !k.cfg.TopicRegex {
		cl.AddConsumeTopics(topic)
	}
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

// setJoined records whether the consuming client is in its group.
func (k *Kafka) setJoined(in bool) {
	k.health.Lock()
	defer k.health.Unlock()
	if in == k.joined {
		return
	}
	k.joined = in
	if !in {
		k.outSince = time.Now()
		k.m.joined.Set(0)
		k.log.Info("kafka consumer out of its group", "group", k.cfg.Group)
		return
	}
	k.m.joined.Set(1)
	k.log.Info("kafka consumer in its group", "group", k.cfg.Group, "instance_id", k.cfg.staticInstanceID())
}

// assigned is called at the end of each join of the group, with what it
// added to the assignment (maybe nothing).
func (k *Kafka) assigned(context.Context, *kgo.Client, map[string][]int32) {
	k.setJoined(true)
}

// watchHealth checks the brokers and the topics every few seconds and logs
// changes of state (not every failure, so an outage gives no log flood).
func (k *Kafka) watchHealth(ctx context.Context) {
	t := time.NewTicker(min(3*time.Second, max(k.cfg.StallWindow/2, 100*time.Millisecond)))
	defer t.Stop()
	for {
		err := k.check(ctx)
		k.setStatus(err)
		if err == nil {
			k.refreshEnds(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchProgress finds stalled partitions and a consumer that stays out of
// its group, and restarts the consumer then: with backoff (the stall window,
// doubled at each restart that did not help, up to 5 minutes), and not
// while the brokers are unreachable (a new client would not help).
func (k *Kafka) watchProgress(ctx context.Context) {
	tick := min(time.Second, max(k.cfg.StallWindow/10, 50*time.Millisecond))
	t := time.NewTicker(tick)
	defer t.Stop()
	backoff := k.cfg.StallWindow
	var lastRestart time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		stalled := k.findStalls(now)
		k.health.Lock()
		k.stalled = stalled
		joined, outSince, brokersOK := k.joined, k.outSince, k.status == nil
		k.health.Unlock()
		k.m.stalled.Set(float64(len(stalled)))
		var why string
		switch {
		case len(stalled) > 0:
			why = stalledError(stalled, k.cfg.StallWindow).Error()
		case !joined && now.Sub(outSince) > max(k.cfg.StallWindow, k.cfg.SessionTimeout):
			// A join can legitimately wait for a dead member's session to
			// time out; past that, the group is not letting this member in.
			why = fmt.Sprintf("not in consumer group %q for %s", k.cfg.Group, now.Sub(outSince).Round(time.Second))
		default:
			if joined && now.Sub(lastRestart) > 2*backoff {
				backoff = k.cfg.StallWindow
			}
			continue
		}
		if !brokersOK || now.Sub(lastRestart) < backoff {
			continue
		}
		if !lastRestart.IsZero() {
			backoff = min(2*backoff, 5*time.Minute)
		}
		lastRestart = now
		k.log.Error("kafka source stalled: restarting the consumer", "why", why)
		select {
		case k.restart <- why:
		default:
		}
	}
}

// findStalls returns the assigned partitions that have records to read
// (their high watermark is past what the source has read) and have made no
// progress for the stall window. The window starts at the partition's
// latest progress or the latest moment it had nothing to read. Partitions
// stopped on an error (Kafka.fail) are reported as such, not as stalled: a
// new consumer would not help them.
func (k *Kafka) findStalls(now time.Time) []stall {
	k.health.Lock()
	failed := make(map[string]bool, len(k.failed))
	for n := range k.failed {
		failed[n] = true
	}
	k.health.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []stall
	for name, p := range k.parts {
		if failed[name] {
			continue
		}
		hwm, ok := k.hwm[name]
		p.mu.Lock()
		read := max(p.pos.Next, p.readTo)
		if !ok || hwm <= read {
			p.progressAt = now
		}
		since := p.progressAt
		p.mu.Unlock()
		if ok && hwm > read && now.Sub(since) > k.cfg.StallWindow {
			out = append(out, stall{log: name, lag: hwm - read, since: since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].log < out[j].log })
	return out
}

// refreshEnds reads the end offsets of the assigned partitions, so lag is
// known even when a partition has nothing new to fetch (after a restart at
// its end) or its fetches stall.
func (k *Kafka) refreshEnds(ctx context.Context) {
	k.mu.Lock()
	var topics []string
	seen := map[string]bool{}
	for _, p := range k.parts {
		if !seen[p.topic] {
			seen[p.topic] = true
			topics = append(topics, p.topic)
		}
	}
	k.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		name := LogName(o.Topic, o.Partition)
		k.mu.Lock()
		p := k.parts[name]
		if p != nil && o.Offset > k.hwm[name] {
			k.hwm[name] = o.Offset
		}
		k.mu.Unlock()
		if p != nil {
			p.updateLag(o.Offset)
		}
	})
}

func (k *Kafka) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := k.admCl.Ping(ctx); err != nil {
		if k.cfg.SASL != nil || k.cfg.TLS != nil {
			// Brokers that refuse a login or a handshake often just close
			// the connection: say what to check.
			return fmt.Errorf("kafka: brokers %v unreachable or refused the connection (check the TLS settings and SASL credentials): %w", k.cfg.Brokers, err)
		}
		return fmt.Errorf("kafka: brokers %v unreachable: %w", k.cfg.Brokers, err)
	}
	if k.cfg.TopicRegex {
		return nil
	}
	td, err := k.adm.ListTopics(ctx, k.cfg.Topics...)
	if err != nil {
		return fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, t := range k.cfg.Topics {
		d, ok := td[t]
		if !ok {
			return fmt.Errorf("kafka: topic %q does not exist", t)
		}
		if d.Err != nil {
			return fmt.Errorf("kafka: topic %q: %w", t, d.Err)
		}
	}
	return nil
}

func (k *Kafka) setStatus(err error) {
	k.health.Lock()
	prev := k.status
	k.status = err
	k.health.Unlock()
	switch {
	case err == nil && prev != nil:
		k.m.ready.Set(1)
		k.log.Info("kafka brokers answer and the topics exist", "brokers", k.cfg.Brokers, "topics", k.cfg.Topics)
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		k.m.ready.Set(0)
		k.log.Error("kafka source not ready: brokers or topics", "err", err)
	}
}

// adjustOffsets starts each assigned partition at its ledger's position,
// not at the group's committed offset: the ledger is the record of what was
// consumed. A partition without a ledger log starts at its first offset.
func (k *Kafka) adjustOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for topic, ps := range assigned {
		for part := range ps {
			p, err := k.assign(topic, part)
			if err != nil {
				// Only this partition stops: its records are fetched and
				// dropped (nothing is committed for it), the others go on.
				k.fail(LogName(topic, part), err)
				ps[part] = kgo.NewOffset().AtEnd()
				continue
			}
			k.mu.Lock()
			reread := k.reread[p.name]
			k.mu.Unlock()
			if p.pos.Next > 0 && !reread {
				ps[part] = kgo.NewOffset().At(p.pos.Next).WithEpoch(-1)
			} else {
				ps[part] = kgo.NewOffset().AtStart()
			}
			k.log.Info("kafka partition assigned", "log", p.name, "from_offset", p.pos.Next, "reread", reread)
		}
	}
	return assigned, nil
}

func (k *Kafka) assign(topic string, part int32) (*partition, error) {
	name := LogName(topic, part)
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.parts[name]; p != nil {
		return p, nil
	}
	if !ledger.ValidLogName(name) {
		return nil, fmt.Errorf("topic %q makes the invalid log name %q", topic, name)
	}
	l, err := k.store.CreateLog(name)
	if err != nil {
		return nil, err
	}
	pos := &Position{Topic: topic, Partition: part}
	if l.SourcePosition() == nil && l.Size() > 0 {
		return nil, fmt.Errorf("log %s holds %d entries that did not come from this partition", name, l.Size())
	}
	if b := l.SourcePosition(); b != nil {
		if pos, err = DecodePosition(b); err != nil {
			return nil, fmt.Errorf("log %s: %w", name, err)
		}
		if pos.Topic != topic || pos.Partition != part {
			return nil, fmt.Errorf("log %s records source %s/%d, not %s/%d", name, pos.Topic, pos.Partition, topic, part)
		}
	}
	p := &partition{k: k, name: name, topic: topic, log: l, pos: *pos, in: make(chan batch, 4), done: make(chan struct{}), progressAt: time.Now()}
	p.consumed = k.m.consumed.WithLabelValues(name)
	p.bytes = k.m.bytes.WithLabelValues(name)
	p.gaps = k.m.gaps.WithLabelValues(name)
	p.conflicts = k.m.conflicts.WithLabelValues(name)
	p.redelivered = k.m.redelivered.WithLabelValues(name)
	k.parts[name] = p
	go p.run()
	return p, nil
}

// revoked finishes the revoked partitions' batches in hand, then commits
// the group offsets, so the next owner's lag tools start from the truth.
func (k *Kafka) revoked(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	k.release(lost)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		k.log.Warn("kafka: group offsets not committed on revoke", "err", err)
	}
}

// lost is called when the group session ended (an error, a fenced member):
// the member is out of its group until it joins again.
func (k *Kafka) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	k.setJoined(false)
	k.release(lost)
}

func (k *Kafka) release(ps map[string][]int32) {
	for topic, parts := range ps {
		for _, part := range parts {
			name := LogName(topic, part)
			k.mu.Lock()
			p := k.parts[name]
			delete(k.parts, name)
			k.mu.Unlock()
			if p != nil {
				p.stop()
				k.log.Info("kafka partition released", "log", name, "next_offset", p.pos.Next)
			}
		}
	}
}

// Status is the state of one partition's ingestion, for GET /v1/logs/{log}.
type Status struct {
	Position
	// Assigned says this instance consumes the partition now.
	Assigned bool `json:"assigned"`
	// LastOffset is the last offset ledgered or skipped (-1: none yet).
	LastOffset int64 `json:"last_offset"`
	// HighWatermark and Lag are from the latest fetch (-1: unknown).
	HighWatermark int64 `json:"high_watermark"`
	Lag           int64 `json:"lag"`
}

// Status returns the ingestion state of the named log, or false if no
// Kafka partition feeds it.
func (k *Kafka) Status(log string) (*Status, bool) {
	k.mu.Lock()
	p := k.parts[log]
	hwm, hasHWM := k.hwm[log]
	k.mu.Unlock()
	var pos Position
	if p != nil {
		p.mu.Lock()
		pos = p.pos.clone()
		p.mu.Unlock()
	} else {
		l, err := k.store.Log(log)
		if err != nil {
			return nil, false
		}
		b := l.SourcePosition()
		if b == nil {
			return nil, false
		}
		d, err := DecodePosition(b)
		if err != nil {
			return nil, false
		}
		pos = *d
	}
	st := &Status{Position: pos, Assigned: p != nil, LastOffset: pos.Next - 1, HighWatermark: -1, Lag: -1}
	if hasHWM {
		st.HighWatermark, st.Lag = hwm, max(hwm-pos.Next, 0)
	}
	return st, true
}

// batch is records of one partition from one poll.
type batch struct {
	recs   []*kgo.Record // without transaction markers
	hwm    int64
	polled time.Time
	end    int64 // the offset after the last record fetched, markers included
}

// partition appends one partition's records to its log, in offset order.
type partition struct {
	k     *Kafka
	name  string
	topic string
	log   *ledger.Log
	in    chan batch
	done  chan struct{}

	mu  sync.Mutex // guards pos, readTo and progressAt; the run goroutine writes pos
	pos Position
	// readTo is the offset after the last record handled, transaction
	// markers included: at or past pos.Next.
	readTo int64
	// progressAt is when readTo last advanced, or the partition was last
	// seen with nothing to read.
	progressAt time.Time

	consumed, bytes, gaps, conflicts, redelivered prometheus.Counter
}

func (p *partition) stop() {
	close(p.in)
	<-p.done
}

// caughtUp ends a re-read of the partition (see Kafka.reread): it has
// reached the log's position.
func (p *partition) caughtUp() {
	p.k.mu.Lock()
	if p.k.reread[p.name] {
		delete(p.k.reread, p.name)
		p.k.log.Info("kafka partition re-read up to the log's position", "log", p.name, "next_offset", p.pos.Next)
	}
	p.k.mu.Unlock()
}

func (p *partition) updateLag(hwm int64) {
	p.mu.Lock()
	next := p.pos.Next
	p.mu.Unlock()
	p.k.m.lag.WithLabelValues(p.name).Set(float64(max(hwm-next, 0)))
}

func (p *partition) run() {
	defer close(p.done)
	for b := range p.in {
		for len(b.recs) > 0 {
			n := min(len(b.recs), p.k.cfg.BatchRecords)
			if err := p.append(b.recs[:n]); err != nil {
				// The ledger refused or failed: stop this partition without
				// advancing; the records are read again after a restart.
				p.k.fail(p.name, fmt.Errorf("append at offset %d: %w", b.recs[0].Offset, err))
				for range p.in {
				}
				return
			}
			if p.pos.Next <= b.recs[n-1].Offset+1 {
				p.caughtUp()
			}
			b.recs = b.recs[n:]
		}
		p.mu.Lock()
		if end := max(p.pos.Next, b.end); end > p.readTo {
			p.readTo, p.progressAt = end, time.Now()
		}
		p.mu.Unlock()
		p.updateLag(b.hwm)
		p.k.m.durable.Observe(time.Since(b.polled).Seconds())
	}
}

// append ledgers recs (consecutive records of the partition, in offset
// order) with the new position in one ledger batch.
func (p *partition) append(recs []*kgo.Record) error {
	ctx := context.Background()
	pos := p.pos.clone()
	entries := make([]ledger.Entry, 0, len(recs))
	var last *kgo.Record
	var nbytes int
	for _, r := range recs {
		if r.Offset < pos.Next {
			// Delivered again (a rebalance, a retry): the log holds this
			// offset already. Check that it is the same record.
			if err := p.checkRedelivered(r, &pos); err != nil {
				return err
			}
			continue
		}
		if r.Offset > pos.Next {
			pos.addGap(pos.Next, r.Offset-1)
			p.gaps.Add(float64(r.Offset - pos.Next))
			p.k.log.Info("kafka offsets skipped", "log", p.name, "from", pos.Next, "to", r.Offset-1)
		}
		entries = append(entries, p.k.entry(r))
		pos.Next = r.Offset + 1
		last = r
		nbytes += len(r.Value) + len(r.Key)
	}
	if last == nil && len(pos.Conflicted) == len(p.pos.Conflicted) && pos.Conflicts == p.pos.Conflicts {
		return nil
	}
	var tries []int // by entry: the fallback ids tried
	for {
		_, err := p.log.AppendSource(ctx, entries, pos.encode())
		var ce *ledger.ConflictError
		if errors.As(err, &ce) {
			// The id is taken by an earlier record of the partition (a
			// producer retry, a reused id): ledger this record under its
			// position instead, marked. If a producer took that id too,
			// number it. Deterministic: it depends only on the partition's
			// earlier records. Each retry moves one entry to its next id,
			// so this ends.
			e := &entries[ce.Item]
			if tries == nil {
				tries = make([]int, len(entries))
			}
			if tries[ce.Item] == 0 {
				e.Marks |= merkle.MarkDuplicateID
				p.k.m.dupIDs.WithLabelValues(p.name).Inc()
			}
			id, ok := fallbackID(e, &tries[ce.Item])
			if !ok {
				return err
			}
			e.ID = id
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	p.mu.Lock()
	p.pos = pos
	if pos.Next > p.readTo {
		p.readTo, p.progressAt = pos.Next, time.Now()
	}
	p.mu.Unlock()
	if last != nil {
		flagged := 0
		for i := range entries {
			if entries[i].Marks&^merkle.MarkDuplicateID != 0 {
				flagged++
			}
		}
		p.k.m.flagged.Add(float64(flagged))
		p.consumed.Add(float64(len(entries)))
		p.bytes.Add(float64(nbytes))
		// The group offset follows the ledger, never leads it.
		p.k.client().MarkCommitRecords(last)
	}
	return nil
}

// checkRedelivered compares a record at an offset the log already holds
// with the leaf the log has for it. A difference is an integrity violation:
// the original leaf stays, and the conflict is recorded in pos.
func (p *partition) checkRedelivered(r *kgo.Record, pos *Position) error {
	p.redelivered.Inc()
	rec, err := p.findOffset(r.Offset)
	if errors.Is(err, ledger.ErrNotFound) {
		// Inside a recorded gap: the offset was skipped when first read, so
		// a record there now was written after the fact.
		p.violation(r, pos, 0, fmt.Sprintf("offset %d was skipped when first read; a record is there now", r.Offset))
		return nil
	}
	if err != nil {
		return err
	}
	e := p.k.entry(r)
	if rec.Leaf.Marks&merkle.MarkDuplicateID != 0 {
		// The id was chosen when the record was first ledgered, from the
		// ids of the records before it; the rest of the leaf is compared.
		e.ID = rec.Leaf.ID
		e.Marks |= merkle.MarkDuplicateID
	}
	if leafOf(p.name, &e) == rec.LeafHash {
		return nil
	}
	p.violation(r, pos, rec.Index, fmt.Sprintf("record at offset %d differs from the leaf at index %d", r.Offset, rec.Index))
	return nil
}

func (p *partition) violation(r *kgo.Record, pos *Position, index uint64, detail string) {
	e := p.k.entry(r)
	h := leafOf(p.name, &e)
	for _, c := range pos.Conflicted {
		if c.Offset == r.Offset && c.LeafHash == h.String() {
			return // the same rewrite seen again
		}
	}
	pos.addConflict(Conflict{Offset: r.Offset, Index: index, LeafHash: h.String()})
	p.conflicts.Inc()
	p.k.log.Error("integrity violation: kafka record differs from the ledger", "log", p.name, "offset", r.Offset, "index", index, "detail", detail)
	if f := p.k.OnViolation; f != nil {
		f(Violation{Log: p.name, Kind: "offset_conflict", Offset: r.Offset, Index: index, LeafHash: h, Detail: detail})
	}
}

// findOffset finds the entry of the log read from offset, by binary search:
// a partition's log holds its records in offset order.
func (p *partition) findOffset(off int64) (*ledger.Record, error) {
	size := p.log.Size()
	i := sort.Search(int(size), func(i int) bool {
		rec, err := p.log.Entry(uint64(i))
		return err != nil || rec.Leaf.Source == nil || rec.Leaf.Source.Offset >= off
	})
	if uint64(i) == size {
		return nil, ledger.ErrNotFound
	}
	rec, err := p.log.Entry(uint64(i))
	if err != nil {
		return nil, err
	}
	if rec.Leaf.Source == nil || rec.Leaf.Source.Offset != off {
		return nil, ledger.ErrNotFound
	}
	return rec, nil
}

// entry turns a record into a ledger entry: a pure function of the record,
// so two instances consuming one partition build identical leaves.
func (k *Kafka) entry(r *kgo.Record) ledger.Entry {
	src := &merkle.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	e := ledger.Entry{Source: src, Time: r.Timestamp, HasKey: r.Key != nil, Key: r.Key}
	if len(e.Key) > merkle.MaxKey {
		h := sha256.Sum256(e.Key)
		e.Key = h[:]
		e.Marks |= merkle.MarkKeyOversize
	}
	if e.Time.IsZero() {
		e.Time = time.Unix(0, 0).UTC()
	}
	for _, h := range r.Headers {
		if h.Key == k.cfg.IDHeader && e.ID == "" && len(h.Value) > 0 && len(h.Value) <= merkle.MaxID && utf8.Valid(h.Value) {
			e.ID = string(h.Value)
		}
		e.Headers = append(e.Headers, merkle.Header{Key: h.Key, Value: h.Value})
	}
	if e.ID == "" {
		e.ID = positionID(src)
	}
	v := r.Value
	switch {
	case len(v) > k.cfg.MaxRecordBytes:
		h := merkle.Hash(sha256.Sum256(v))
		e.PayloadHash = &h
		e.Marks |= merkle.MarkOversize
	case len(v) == 0:
		e.Payload = []byte{}
		e.Marks |= merkle.MarkEmpty | merkle.MarkNotJSON
	default:
		e.Payload = v
		if !utf8.Valid(v) {
			e.Marks |= merkle.MarkNotUTF8
		}
		if json.Valid(v) {
			e.PayloadJSON = true
		} else {
			e.Marks |= merkle.MarkNotJSON
		}
	}
	return e
}

// maxFallbackIDs bounds the numbered ids fallbackID tries for one record.
const maxFallbackIDs = 16

// fallbackID returns the next id to try for e, whose id is taken: its
// position id, then the position id numbered "#1", "#2"..., skipping the id
// it has now. *n counts the ids tried.
func fallbackID(e *ledger.Entry, n *int) (string, bool) {
	for *n <= maxFallbackIDs {
		id := positionID(e.Source)
		if *n > 0 {
			id += "#" + strconv.Itoa(*n)
		}
		*n++
		if id != e.ID {
			return id, true
		}
	}
	return "", false
}

// positionID is the id of a record whose producer gave none.
func positionID(s *merkle.Source) string {
	return s.Topic + "/" + strconv.Itoa(int(s.Partition)) + "/" + strconv.FormatInt(s.Offset, 10)
}

// leafOf computes the leaf hash the ledger gives e in log.
func leafOf(log string, e *ledger.Entry) merkle.Hash {
	l := merkle.Leaf{Log: log, ID: e.ID, HasKey: e.HasKey, Key: e.Key, Time: e.Time.UnixNano(), Source: e.Source, Headers: e.Headers, Marks: e.Marks}
	if e.PayloadHash != nil {
		l.PayloadSHA256 = *e.PayloadHash
	} else {
		l.PayloadSHA256 = sha256.Sum256(e.Payload)
	}
	h, err := l.Hash()
	if err != nil {
		return merkle.Hash{}
	}
	return h
}

type kafkaMetrics struct {
	consumed, bytes, gaps, conflicts, redelivered, dupIDs *prometheus.CounterVec
	lag                                                   *prometheus.GaugeVec
	flagged, fetchErrors, restarts                        prometheus.Counter
	ready, joined, stalled                                prometheus.Gauge
	durable                                               prometheus.Histogram
}

func newKafkaMetrics() *kafkaMetrics {
	cv := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"log"})
	}
	return &kafkaMetrics{
		consumed:    cv("kafka_records_total", "Kafka records ledgered, by log."),
		bytes:       cv("kafka_record_bytes_total", "Bytes of Kafka record keys and values ledgered, by log."),
		gaps:        cv("kafka_gap_offsets_total", "Offsets a partition skipped (compaction, transaction markers, retention), by log."),
		conflicts:   cv("kafka_offset_conflicts_total", "Records re-read at an offset the log holds with different content (integrity violations), by log."),
		redelivered: cv("kafka_redelivered_records_total", "Records delivered again at an offset the log already holds, by log."),
		dupIDs:      cv("kafka_duplicate_ids_total", "Records whose id header was taken by an earlier record of the partition, by log."),
		lag:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kafka_consumer_lag_records", Help: "Records between the ledger's position and the partition's high watermark, by log."}, []string{"log"}),
		flagged:     prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_flagged_records_total", Help: "Records ledgered with a mark (not JSON, not UTF-8, empty, oversize)."}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_fetch_errors_total", Help: "Errors fetching from the brokers."}),
		ready:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_ready", Help: "1 when the brokers answer and the topics exist."}),
		joined:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_group_joined", Help: "1 while the source is in its consumer group with an assignment."}),
		stalled:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "kafka_stalled_partitions", Help: "Assigned partitions with records to read and no progress within the stall window."}),
		restarts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "kafka_consumer_restarts_total", Help: "Times the source replaced its Kafka consumer because it stalled or stayed out of its group."}),
		durable: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kafka_fetch_to_durable_seconds", Help: "Time from a poll returning records to their ledger entries being durable.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
}

func (m *kafkaMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.consumed, m.bytes, m.gaps, m.conflicts, m.redelivered, m.dupIDs, m.lag, m.flagged, m.fetchErrors, m.ready, m.joined, m.stalled, m.restarts, m.durable}
}

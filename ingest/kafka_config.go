package ingest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
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
	// MetadataRefresh is how often the consuming client re-reads the
	// brokers' metadata (default 10s, at most 1h; the Kafka client's own
	// default is 5 minutes). A partition added to a consumed topic, or with
	// TopicRegex a new matching topic, is found at the group leader's next
	// re-read, which then rebalances the group: it is consumed within about
	// this long plus a rebalance. A partition of a consumed topic that no
	// member of the group has consumed for longer than MetadataRefresh plus
	// StallWindow makes the source not ready.
	MetadataRefresh time.Duration `yaml:"metadata_refresh"`
	// ResumeRecreated lets a partition whose topic was deleted and
	// recreated while the source was not consuming it (its topic id
	// changed) be read again from its first offset, each offset compared
	// with the leaf its log holds, as when the source sees the recreation
	// happen. The violation (source_recreated) is raised either way;
	// without this (the default) the partition stays stopped until an
	// operator has looked (docs/checkers.md#source_recreated).
	ResumeRecreated bool `yaml:"resume_recreated"`
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
	// Password is sent as given. The daemon expands ${VAR} in its
	// configuration file (and takes AUDITD_KAFKA_SASL_PASSWORD literally)
	// before it gets here; expanding again would mangle a password that
	// holds a $.
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
	if c.MetadataRefresh <= 0 {
		c.MetadataRefresh = 10 * time.Second
	}
}

// Validate reports a configuration the source cannot run with.
func (c *KafkaConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("kafka: no brokers")
	case len(c.Topics) == 0:
		return errors.New("kafka: no topics")
	case c.MetadataRefresh > 0 && (c.MetadataRefresh < 10*time.Millisecond || c.MetadataRefresh > time.Hour):
		return fmt.Errorf("kafka: metadata_refresh %v is not between 10ms and 1h", c.MetadataRefresh)
	}
	if c.TopicRegex {
		if _, err := c.topicPatterns(); err != nil {
			return err
		}
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

// topicPatterns compiles Topics as regular expressions, as the Kafka client
// does with TopicRegex: a topic matching any of them is consumed.
func (c *KafkaConfig) topicPatterns() ([]*regexp.Regexp, error) {
	res := make([]*regexp.Regexp, len(c.Topics))
	for i, t := range c.Topics {
		re, err := regexp.Compile(t)
		if err != nil {
			return nil, fmt.Errorf("kafka: topic pattern %q: %w", t, err)
		}
		res[i] = re
	}
	return res, nil
}

// LogName is the ledger log a topic partition feeds.
func LogName(topic string, partition int32) string {
	return topic + "." + strconv.Itoa(int(partition))
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
	switch s.Mechanism {
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	default:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	}
}

// ClientOpts returns the options that connect a franz-go client to the
// configured brokers: the seeds, the client id, TLS and SASL, retry
// backoff and logging to logger. The source's clients start from them, and
// so does the re-read check's (package checkers).
func (c KafkaConfig) ClientOpts(logger *slog.Logger) ([]kgo.Opt, error) {
	c.setDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	conn := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.WithLogger(kgoLogger{logger}),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			d := 100 * time.Millisecond << min(tries, 6)
			return min(d, 5*time.Second)
		}),
	}
	if c.TLS != nil {
		tc, err := c.TLS.config()
		if err != nil {
			return nil, err
		}
		conn = append(conn, kgo.DialTLSConfig(tc))
	}
	if s := c.SASL; s != nil {
		conn = append(conn, kgo.SASL(s.mechanism()))
	}
	return conn, nil
}

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/auditd/auditd/ingest"
	"github.com/auditd/auditd/rederive"
)

// Config is auditd serve's configuration, read from a YAML file (--config)
// and overridden by flags. These comments are its reference.
//
// Every string the file sets, anywhere in it (webhook headers, tokens,
// Kafka credentials, peer URLs, paths ...), follows one rule for the
// environment: ${NAME} is replaced by the variable NAME, and an unset NAME
// is an error naming it and the field (config FILE: webhooks[0].headers.
// Authorization: TOKEN is not set); a variable set to "" is taken as
// given. $NAME without braces, $$ and a lone $ stay as they are. Derivation
// spec files follow the same rule for their stores. Flags and the
// AUDITD_* variables are taken as given.
type Config struct {
	// DataDir holds the ledger (a Pebble database) and, unless KeyFile says
	// otherwise, the signing key. Default ./auditd-data.
	DataDir string `yaml:"data_dir"`
	// Listen is the HTTP listen address. Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// KeyFile is the checkpoint signing key (a signed-note private key,
	// "PRIVATE+KEY+<name>+<hash>+<key>"). If it does not exist, serve
	// generates one named Origin, writes it with mode 0600, and writes the
	// verifier key beside it (KeyFile with ".pub"). Default DataDir/auditd.key.
	// It must be a regular file of at most 64 KiB (as must every key and
	// token file auditd reads) that only its owner can read or write.
	KeyFile string `yaml:"key_file"`
	// AllowInsecureKeyFile starts serve even when a private key file (the
	// signing key, the witness key) is readable or writable by group or
	// others (logging an error); without it serve refuses such a key,
	// naming the chmod that fixes it. Default false.
	AllowInsecureKeyFile bool `yaml:"allow_insecure_key_file"`
	// Origin names a generated key; checkpoints of log L carry the origin
	// "<key name>/L". Default: "<host>-<key hash>", unique to the key and
	// stored in it, so a data dir keeps its origin (docs/witness.md). An
	// existing key keeps the name it has.
	Origin string `yaml:"origin"`
	// CheckpointInterval is the least time between two checkpoints of one
	// log; a log that grew is signed at most this often. Default 100ms.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// MaxBatch bounds the entries of one group commit. Default 16384.
	MaxBatch int `yaml:"max_batch"`
	// BatchDelay lets a group commit wait this long for more requests.
	// Default 0: commit what is queued.
	BatchDelay time.Duration `yaml:"batch_delay"`
	// CacheBytes is Pebble's block cache size. Default 128 MiB.
	CacheBytes int64 `yaml:"cache_bytes"`
	// DiskReserveBytes is the free space of the data directory's file
	// system below which appends are refused (503 disk_full, /readyz 503,
	// the alert storage/disk_full) until space is freed; they resume by
	// themselves within seconds. Default 0: sized from the ledger's
	// memtable (52 MiB; 16 MiB on a file system under 512 MiB). -1 turns
	// the guard off (then a full disk stops the ledger until a restart).
	DiskReserveBytes int64 `yaml:"disk_reserve_bytes"`
	// CheckpointDir keeps each log's latest signed checkpoint in a file
	// outside the ledger's database, checked at start: a log whose storage
	// is behind or inconsistent with it is refused (see RollbackReadOnly).
	// Another disk guards against losing both. Default DataDir/checkpoints.
	CheckpointDir string `yaml:"checkpoint_dir"`
	// CheckpointGuardDir keeps a second copy of each log's latest signed
	// checkpoint outside the data dir, by signing key
	// (<dir>/<key name>+<key hash>/<log>), written with the checkpoint file
	// and checked with it at start: a data dir restored from an older copy
	// (to any path on this host) is behind the key's guard copy and is
	// refused like a lost WAL tail (see RollbackReadOnly). Default
	// $XDG_STATE_HOME/auditd/guard, or ~/.local/state/auditd/guard; "off"
	// (or "none") turns it off. docs/operations.md says which restores it
	// catches and which need a witness.
	CheckpointGuardDir string `yaml:"checkpoint_guard_dir"`
	// RollbackReadOnly starts anyway when a log's storage is behind or
	// inconsistent with its checkpoint file (storage lost signed entries):
	// that log is served read-only as it is (appends get 503 read_only, no
	// checkpoint is signed) and an integrity alert is raised. Default false:
	// serve refuses to start, naming the log. See docs/operations.md.
	RollbackReadOnly bool `yaml:"rollback_read_only"`
	// Logs are created at start (others are created by their first POST
	// when CreateLogs is true).
	Logs []string `yaml:"logs"`
	// CreateLogs lets a POST to an unknown log create it. Default true.
	CreateLogs *bool `yaml:"create_logs"`
	// MaxLogs bounds the logs POSTs may create: once the store holds
	// MaxLogs logs (counting those a POST is creating), a POST to a new
	// name gets 403, however many arrive at once. 0 means no bound.
	// Default 10000.
	MaxLogs int `yaml:"max_logs"`
	// MaxMetricLogs bounds the logs /metrics has series of: past the
	// first MaxMetricLogs by name, per-log counters and gauges are summed
	// into log="_other". 0 means no bound. Default 1000.
	MaxMetricLogs int `yaml:"max_metric_logs"`
	// MaxBodyBytes bounds a POST body; larger ones get 413. Default 32 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxEvents bounds the events of one POST. Default 100000.
	MaxEvents int `yaml:"max_events"`
	// MaxPayloadBytes bounds one event's payload. Default 1 MiB.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	// MaxConcurrentWrites bounds the POSTs read and decoded at once; others
	// wait. A decoded POST gives its slot back while its entries wait for
	// their group commit, holding only its share of MaxInflightBytes.
	// Default 16.
	MaxConcurrentWrites int `yaml:"max_concurrent_writes"`
	// MaxInflightBytes bounds the bytes of the POST bodies decoded and
	// appended at once, across requests: a POST takes its Content-Length
	// (MaxBodyBytes without one) and 768 bytes for each event it may hold
	// before reading, and waits while it is spent; once decoded it holds
	// its bytes and 768 per event. Default 4 x MaxBodyBytes. See docs/operations.md for the
	// memory this bounds.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// BodyTimeout bounds the time a request body takes to arrive, on every
	// route (a POST of entries from when its write slot is granted);
	// slower ones get 408 or the connection closed. Default 30s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MaxStreams bounds the event streams (GET /v1/alerts/stream) open at
	// once; beyond it one gets 503 too_many_streams. Default 100.
	MaxStreams int `yaml:"max_streams"`
	// WriteToken, if set, is the bearer token POSTs must carry. The
	// environment variable AUDITD_WRITE_TOKEN overrides it.
	WriteToken string `yaml:"write_token"`
	// ReadToken, if set, is the bearer token reads must carry. Reads are
	// public by default. AUDITD_READ_TOKEN overrides it.
	ReadToken string `yaml:"read_token"`
	// WriteTokenFile and ReadTokenFile, if set, hold the tokens (the file's
	// content, surrounding whitespace removed); they replace write_token
	// and read_token. Flags show in ps, files do not. Each must be a
	// regular file of at most 64 KiB.
	WriteTokenFile string `yaml:"write_token_file"`
	ReadTokenFile  string `yaml:"read_token_file"`
	// TLSCertFile and TLSKeyFile, if set (both or neither), make the API
	// listener serve HTTPS (TLS 1.2 or later) with this certificate chain
	// (PEM, leaf first) and private key (PEM). serve refuses to start on a
	// missing file or a key that does not match. The files are read again
	// when they change (looked at, at most once a second, by a handshake)
	// and on SIGHUP; a new pair that does not load is refused with an
	// error log (and auditd_tls_certificate_reloads_total{result="error"})
	// while the previous one keeps serving. The debug listener stays
	// plain HTTP. AUDITD_TLS_CERT_FILE and AUDITD_TLS_KEY_FILE override
	// them. See docs/operations.md#tls.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSClientCAFile, if set, is a PEM bundle of CAs: every client must
	// present a certificate chaining to one of them (the handshake fails
	// otherwise), on every route, /healthz and /metrics included. Tokens,
	// if set, are required as well. Read at start. Needs TLSCertFile.
	// AUDITD_TLS_CLIENT_CA_FILE overrides it.
	TLSClientCAFile string `yaml:"tls_client_ca_file"`
	// WaitTimeout bounds POST ?wait=checkpoint. Default 30s.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// ShutdownTimeout bounds the graceful drain of HTTP requests on
	// SIGINT/SIGTERM. Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// HistoryInterval is how often the daemon samples its logs' sizes and
	// checkpoints and its derivations' drift for the status page's charts
	// (GET /v1/history keeps 360 samples: an hour at the default 10s).
	HistoryInterval time.Duration `yaml:"history_interval"`
	// DebugListen, if set, serves Go's /debug/pprof profiles on this
	// address (keep it on loopback). Default off.
	DebugListen string `yaml:"debug_listen"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json. Default text.
	LogFormat string `yaml:"log_format"`
	// Kafka, if set, consumes Kafka topics into the ledger: one log per
	// topic partition, named <topic>.<partition>, exactly once. Its fields
	// are documented in docs/kafka.md; the --kafka-* flags override them.
	// AUDITD_KAFKA_SASL_PASSWORD overrides kafka.sasl.password. Without
	// kafka.instance_id in the file, the source is a static group member
	// with an id derived from the signing key and the data directory (see
	// kafkaConfig); instance_id: "" or "none" makes it a dynamic member.
	Kafka *ingest.KafkaConfig `yaml:"kafka"`
	// kafkaInstanceIDSet says the file gave kafka.instance_id, even "".
	kafkaInstanceIDSet bool
	// reloadFrom, if set, reads the configuration again as serve was
	// started (file, flags, environment), for a reload (reload.go).
	reloadFrom func() (Config, error)
	// Derivations are derivation spec files (YAML with CEL expressions, see
	// docs/derivations.md). The daemon folds each derivation over the
	// ledger on its schedule, compares the result with its derived store,
	// and raises alerts on confirmed drift. --derivations adds files.
	Derivations []string `yaml:"derivations"`
	// DerivationWorkers is the fold parallelism (default: the number of
	// CPUs).
	DerivationWorkers int `yaml:"derivation_workers"`
	// Webhooks receive every alert change as an Alertmanager webhook (v4)
	// message, so receivers written for Alertmanager work unchanged.
	Webhooks []WebhookConfig `yaml:"webhooks"`
	// ExternalURL is this auditd's base URL as alert receivers reach it
	// (alerts link to ExternalURL/v1/alerts/...). Default http://LISTEN.
	ExternalURL string `yaml:"external_url"`
	// Checks schedules the self-audit the daemon runs over its own ledger
	// (docs/checkers.md): the ledger scrub and the checkpoint audit.
	Checks ChecksConfig `yaml:"checks"`
	// Witness configures witnessing, both ways (see WitnessConfig).
	Witness WitnessConfig `yaml:"witness"`
	// Retention prunes old payloads, keeping every proof (see
	// RetentionConfig in retention.go).
	Retention RetentionConfig `yaml:"retention"`
}

// ChecksConfig schedules the self-audit checkers. Each finding is kept
// (GET /v1/checks), exported (auditd_checks_findings) and raised as an
// integrity alert.
type ChecksConfig struct {
	// ScrubInterval is how often a full ledger scrub starts: it re-reads
	// every entry, recomputes its leaf hash and rebuilds the tree against
	// the stored tiles and signed checkpoints. 0 disables it. Default 24h;
	// --scrub-interval overrides.
	ScrubInterval time.Duration `yaml:"scrub_interval"`
	// ScrubRate bounds the entries a pass checks per second, so that a
	// scrub never starves ingestion; 0 is unthrottled. Default 20000: a
	// daily pass covers 1.7 billion entries, for about 4% of one core
	// (docs/perf/decisions.md). --scrub-rate overrides.
	ScrubRate float64 `yaml:"scrub_rate"`
	// CheckpointAuditInterval is how often the checkpoint audit starts: it
	// verifies the signature of every stored signed checkpoint and its
	// consistency with the latest. 0 disables it. Default 1h.
	CheckpointAuditInterval time.Duration `yaml:"checkpoint_audit_interval"`
	// CheckpointAuditRate bounds the checkpoints the audit checks per
	// second (each is a signature check and a consistency proof); 0 is
	// unthrottled. Default 250: about 4% of one core
	// (docs/perf/decisions.md).
	CheckpointAuditRate float64 `yaml:"checkpoint_audit_rate"`
	// Jitter delays each scheduled pass by a random duration below it
	// (and below a tenth of the checker's interval), so that instances
	// restarted together do not audit together. Default 15m.
	Jitter time.Duration `yaml:"jitter"`
	// Peers cross-checks this instance's signed checkpoints with other
	// servers' of the same logs (fork detection; see PeersConfig and
	// docs/checkers.md#peer-cross-check).
	Peers PeersConfig `yaml:"peers"`
	// Invariants declares CEL conditions over derivations' state, checked
	// over each one's latest saved result (see InvariantsConfig).
	Invariants InvariantsConfig `yaml:"invariants"`
	// KafkaReread schedules the Kafka source re-read, on whenever a Kafka
	// source is configured (see KafkaRereadConfig).
	KafkaReread KafkaRereadConfig `yaml:"kafka_reread"`
	// jobs are the compiled derivations (Config.Derivations), loaded
	// once by serve (loadDerivations).
	jobs []rederive.Job
	// kafka is the Kafka source's configuration (Config.Kafka).
	kafka *ingest.KafkaConfig
}

// WebhookConfig is an alert webhook receiver.
type WebhookConfig struct {
	// Name identifies the receiver (default webhook-N).
	Name string `yaml:"name"`
	// URL receives POSTs of Alertmanager webhook messages.
	URL string `yaml:"url"`
	// Headers are added to each request; ${VAR} is expanded from the
	// environment as everywhere in the file (for example Authorization:
	// Bearer ${TOKEN}; an unset TOKEN is an error, see Config).
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request (default 10s); MaxRetries bounds retries
	// of network errors, 5xx and 429 (default 5), with exponential backoff.
	Timeout    time.Duration `yaml:"timeout"`
	MaxRetries int           `yaml:"max_retries"`
}

func defaultConfig() Config {
	t := true
	return Config{
		DataDir: "./auditd-data", Listen: "127.0.0.1:8080",
		CheckpointInterval: 100 * time.Millisecond, MaxBatch: 16384, CacheBytes: 128 << 20,
		CreateLogs: &t, MaxBodyBytes: 32 << 20, MaxEvents: 100_000, MaxPayloadBytes: 1 << 20,
		MaxConcurrentWrites: 16, WaitTimeout: 30 * time.Second, BodyTimeout: 30 * time.Second, MaxStreams: 100, MaxLogs: 10_000, MaxMetricLogs: 1000, ShutdownTimeout: 10 * time.Second, HistoryInterval: 10 * time.Second,
		LogLevel: "info", LogFormat: "text",
		Checks: ChecksConfig{ScrubInterval: 24 * time.Hour, ScrubRate: 20_000, CheckpointAuditInterval: time.Hour,
			CheckpointAuditRate: 250, Jitter: 15 * time.Minute, Peers: PeersConfig{Interval: time.Minute},
			Invariants: InvariantsConfig{Interval: time.Minute}, KafkaReread: defaultKafkaReread()},
	}
}

// loadConfig reads the defaults, then the YAML file at path (if any), then
// the environment. Unknown YAML fields are errors.
func loadConfig(path string) (Config, error) {
	c := defaultConfig()
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		defer f.Close()
		dec := yaml.NewDecoder(f)
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, friendlyConfigError(path, c, err)
		}
		c.Checks.Invariants.file = path
		if err := expandConfigEnv(&c); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
		// An explicit instance_id: "" (dynamic membership) differs from
		// none given (the derived default); the struct cannot tell them apart.
		var given struct {
			Kafka *struct {
				InstanceID *string `yaml:"instance_id"`
			} `yaml:"kafka"`
		}
		if _, err := f.Seek(0, io.SeekStart); err == nil {
			if err := yaml.NewDecoder(f).Decode(&given); err == nil && given.Kafka != nil && given.Kafka.InstanceID != nil {
				c.kafkaInstanceIDSet = true
			}
		}
	}
	if v := os.Getenv("AUDITD_WRITE_TOKEN"); v != "" {
		c.WriteToken = v
	}
	if v := os.Getenv("AUDITD_READ_TOKEN"); v != "" {
		c.ReadToken = v
	}
	for env, dst := range map[string]*string{"AUDITD_TLS_CERT_FILE": &c.TLSCertFile, "AUDITD_TLS_KEY_FILE": &c.TLSKeyFile,
		"AUDITD_TLS_CLIENT_CA_FILE": &c.TLSClientCAFile} {
		if v := os.Getenv(env); v != "" {
			*dst = v
		}
	}
	if v := os.Getenv("AUDITD_KAFKA_SASL_PASSWORD"); v != "" && c.Kafka != nil && c.Kafka.SASL != nil {
		c.Kafka.SASL.Password = v
	}
	return c, nil
}

func (c *Config) validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("config: data_dir is empty")
	case c.Listen == "":
		return errors.New("config: listen is empty")
	case c.CheckpointInterval <= 0:
		return errors.New("config: checkpoint_interval must be positive")
	case c.MaxBatch < 1:
		return errors.New("config: max_batch must be at least 1")
	case c.MaxBodyBytes < 1:
		return errors.New("config: max_body_bytes must be positive")
	case c.MaxStreams < 0:
		return errors.New("config: max_streams must not be negative (0: the default, 100)")
	}
	if c.Origin != "" {
		if err := checkOriginName(c.Origin); err != nil { // origin.go
			return err
		}
	}
	c.Checks.kafka = c.Kafka
	if err := c.Checks.KafkaReread.validate(); err != nil {
		return err
	}
	if _, err := c.Checks.Peers.peers(nil); err != nil { // this instance as a peer: at start, with the key
		return err
	}
	if ch := c.Checks; ch.ScrubInterval < 0 || ch.ScrubRate < 0 || ch.CheckpointAuditInterval < 0 || ch.CheckpointAuditRate < 0 || ch.Jitter < 0 {
		return errors.New("config: checks: intervals, rate and jitter must not be negative")
	}
	if c.Kafka != nil {
		if err := c.Kafka.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if err := c.Retention.validate(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if c.KeyFile == "" {
		c.KeyFile = c.DataDir + "/auditd.key"
	}
	return c.readTokenFiles()
}

// kafkaConfig is the Kafka source's configuration as serve runs it: unless
// the file sets kafka.instance_id, the source joins its group as a static
// member whose id is derived from the signing key's verifier and the data
// directory's absolute path, so a restarted daemon takes over its own
// assignment at once instead of waiting out the session of the member it
// was. Two daemons on copies of one data directory get the same id and
// fence each other: give each its own instance_id, or "none".
func (c *Config) kafkaConfig(verifierKey string) ingest.KafkaConfig {
	kc := *c.Kafka
	if !c.kafkaInstanceIDSet && kc.InstanceID == "" {
		dir, err := filepath.Abs(c.DataDir)
		if err != nil {
			dir = c.DataDir
		}
		h := sha256.Sum256([]byte(verifierKey + "\x00" + dir))
		kc.InstanceID = "auditd-" + hex.EncodeToString(h[:8])
	}
	return kc
}

// bindFlags registers the flags that override the file.
func bindFlags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "ledger data directory")
	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address")
	fs.StringVar(&c.KeyFile, "key-file", c.KeyFile, "checkpoint signing key (generated if missing; default DATA-DIR/auditd.key)")
	fs.BoolVar(&c.AllowInsecureKeyFile, "allow-insecure-key-file", c.AllowInsecureKeyFile, "start even if a private key file (signing key, witness key) is readable by group or others (logs an error)")
	fs.StringVar(&c.Origin, "origin", c.Origin, "name of a generated signing key (checkpoint origin prefix)")
	fs.DurationVar(&c.CheckpointInterval, "checkpoint-interval", c.CheckpointInterval, "least time between checkpoints of one log")
	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "entries per group commit, at most")
	fs.DurationVar(&c.BatchDelay, "batch-delay", c.BatchDelay, "time a group commit waits for more requests")
	fs.Int64Var(&c.CacheBytes, "cache-bytes", c.CacheBytes, "Pebble block cache size in bytes")
	fs.Int64Var(&c.DiskReserveBytes, "disk-reserve-bytes", c.DiskReserveBytes, "free bytes of the data dir's file system below which appends are refused until space is freed (0: sized from the memtable; -1: off)")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", c.CheckpointDir, "directory of the logs' latest checkpoint files (default DATA-DIR/checkpoints)")
	fs.StringVar(&c.CheckpointGuardDir, "checkpoint-guard-dir", c.CheckpointGuardDir, guardFlagUsage)
	fs.BoolVar(&c.RollbackReadOnly, "rollback-read-only", c.RollbackReadOnly, "serve a log behind or inconsistent with its signed checkpoint read-only instead of refusing to start")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest POST body in bytes")
	fs.IntVar(&c.MaxLogs, "max-logs", c.MaxLogs, "logs POSTs may create, at most (0: no bound)")
	fs.Int64Var(&c.MaxInflightBytes, "max-inflight-bytes", c.MaxInflightBytes, "bytes of POST bodies in flight at once, across requests (default 4 x max-body-bytes)")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", c.BodyTimeout, "time a request body may take to arrive (slower: 408 or the connection closed)")
	fs.IntVar(&c.MaxStreams, "max-streams", c.MaxStreams, "event streams (/v1/alerts/stream) open at once, at most (beyond: 503)")
	fs.StringVar(&c.WriteToken, "write-token", c.WriteToken, "bearer token required for writes (visible in ps: prefer --write-token-file or AUDITD_WRITE_TOKEN)")
	fs.StringVar(&c.ReadToken, "read-token", c.ReadToken, "bearer token required for reads (visible in ps: prefer --read-token-file or AUDITD_READ_TOKEN)")
	fs.StringVar(&c.WriteTokenFile, "write-token-file", c.WriteTokenFile, "file holding the write token")
	fs.StringVar(&c.ReadTokenFile, "read-token-file", c.ReadTokenFile, "file holding the read token")
	fs.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "serve HTTPS with this certificate chain (PEM; with --tls-key-file; reloaded when it changes and on SIGHUP)")
	fs.StringVar(&c.TLSKeyFile, "tls-key-file", c.TLSKeyFile, "private key (PEM) of --tls-cert-file")
	fs.StringVar(&c.TLSClientCAFile, "tls-client-ca-file", c.TLSClientCAFile, "require client certificates chaining to these CAs (PEM bundle; needs --tls-cert-file)")
	fs.StringVar(&c.DebugListen, "debug-listen", c.DebugListen, "serve /debug/pprof on this address (off when empty)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	fs.Func("derivations", "derivation spec file to check (repeatable; adds to the config's derivations)", func(v string) error {
		c.Derivations = append(c.Derivations, v)
		return nil
	})
	fs.IntVar(&c.DerivationWorkers, "derivation-workers", c.DerivationWorkers, "fold parallelism (default: the number of CPUs)")
	fs.DurationVar(&c.Checks.ScrubInterval, "scrub-interval", c.Checks.ScrubInterval, "how often a full ledger scrub starts (0 disables it)")
	fs.Float64Var(&c.Checks.ScrubRate, "scrub-rate", c.Checks.ScrubRate, "entries per second a scrub may check (0: unthrottled)")
}

// kafkaFlags are the --kafka-* flags; apply copies those given onto the
// configuration's Kafka section, creating it if needed.
type kafkaFlags struct {
	brokers, topics, group, idHeader     string
	regex, tls, tlsInsecure              bool
	tlsCA, tlsCert, tlsKey               string
	saslMechanism, saslUser, saslPassEnv string
	maxRecordBytes                       int
}

func bindKafkaFlags(fs *flag.FlagSet) *kafkaFlags {
	k := &kafkaFlags{}
	fs.StringVar(&k.brokers, "kafka-brokers", "", "Kafka seed brokers, host:port,... (enables the Kafka source)")
	fs.StringVar(&k.topics, "kafka-topics", "", "Kafka topics to consume, comma-separated")
	fs.BoolVar(&k.regex, "kafka-topic-regex", false, "treat --kafka-topics as regular expressions")
	fs.StringVar(&k.group, "kafka-group", "", `Kafka consumer group (default "auditd")`)
	fs.StringVar(&k.idHeader, "kafka-id-header", "", `record header holding the event id (default "id")`)
	fs.IntVar(&k.maxRecordBytes, "kafka-max-record-bytes", 0, "record values above this are ledgered by hash, marked oversize (default 1 MiB)")
	fs.BoolVar(&k.tls, "kafka-tls", false, "connect to the brokers with TLS")
	fs.StringVar(&k.tlsCA, "kafka-tls-ca", "", "PEM file of CAs for the brokers' certificates (implies --kafka-tls)")
	fs.StringVar(&k.tlsCert, "kafka-tls-cert", "", "client certificate PEM file, for mutual TLS")
	fs.StringVar(&k.tlsKey, "kafka-tls-key", "", "client key PEM file, for mutual TLS")
	fs.BoolVar(&k.tlsInsecure, "kafka-tls-insecure", false, "do not verify the brokers' certificates (testing only)")
	fs.StringVar(&k.saslMechanism, "kafka-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from AUDITD_KAFKA_SASL_PASSWORD)")
	fs.StringVar(&k.saslUser, "kafka-sasl-user", "", "SASL user name")
	return k
}

func (k *kafkaFlags) apply(fs *flag.FlagSet, c *Config) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	any := false
	for n := range set {
		if strings.HasPrefix(n, "kafka-") {
			any = true
		}
	}
	if !any {
		return
	}
	if c.Kafka == nil {
		c.Kafka = &ingest.KafkaConfig{}
	}
	kc := c.Kafka
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	if set["kafka-brokers"] {
		kc.Brokers = split(k.brokers)
	}
	if set["kafka-topics"] {
		kc.Topics = split(k.topics)
	}
	if set["kafka-topic-regex"] {
		kc.TopicRegex = k.regex
	}
	if set["kafka-group"] {
		kc.Group = k.group
	}
	if set["kafka-id-header"] {
		kc.IDHeader = k.idHeader
	}
	if set["kafka-max-record-bytes"] {
		kc.MaxRecordBytes = k.maxRecordBytes
	}
	if k.tls || k.tlsCA != "" || k.tlsCert != "" || k.tlsInsecure {
		if kc.TLS == nil {
			kc.TLS = &ingest.KafkaTLS{}
		}
		if k.tlsCA != "" {
			kc.TLS.CAFile = k.tlsCA
		}
		if k.tlsCert != "" {
			kc.TLS.CertFile, kc.TLS.KeyFile = k.tlsCert, k.tlsKey
		}
		if k.tlsInsecure {
			kc.TLS.InsecureSkipVerify = true
		}
	}
	if k.saslMechanism != "" {
		if kc.SASL == nil {
			kc.SASL = &ingest.KafkaSASL{}
		}
		kc.SASL.Mechanism, kc.SASL.Username = k.saslMechanism, k.saslUser
		if v := os.Getenv("AUDITD_KAFKA_SASL_PASSWORD"); v != "" {
			kc.SASL.Password = v
		}
	}
}

// configPath finds --config in args before the flag set parses them, so the
// file is read first and flags override it.
func configPath(args []string) string {
	for i, a := range args {
		for _, p := range []string{"-config", "--config"} {
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
		}
	}
	return ""
}

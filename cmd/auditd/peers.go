package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/keyfile"
	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/ledger"
)

// PeersConfig configures the peer cross-check (checks.peers,
// docs/checkers.md#peer-cross-check): this instance's logs compared with
// other servers' signed checkpoints of the same logs.
type PeersConfig struct {
	// Interval is how often the cross-check starts. 0 disables it
	// (POST /v1/checks/peers/run still runs it). Default 1m when peers
	// are listed.
	Interval time.Duration `yaml:"interval"`
	// List holds the peers, each checked on every pass. A peer may sign
	// with this instance's key (a split brain: two instances signing one
	// log; or one list shared by every instance, this one included): a
	// peer that answers with this instance's identity is skipped.
	List []PeerConfig `yaml:"list"`

	// self is this instance's identity, and logger where the
	// cross-check's warnings go; both set by serve (openIdentity).
	self   checkers.Instance
	logger *slog.Logger
}

// PeerConfig is one peer: another auditd consuming the same partitions,
// or any server of C2SP checkpoints and consistency proofs for the same
// logs at auditd's API paths.
type PeerConfig struct {
	// URL is the peer's base URL, e.g. http://auditd-b:8080. Required.
	URL string `yaml:"url"`
	// Key is the signed-note verifier key the peer's checkpoints must
	// verify with (its GET /v1/verifier), or a file holding it
	// (key_file). One of them is required.
	Key     string `yaml:"key"`
	KeyFile string `yaml:"key_file"`
	// OriginPrefix is the peer's checkpoint origin without the log name;
	// default "<key name>/", as auditd signs.
	OriginPrefix string `yaml:"origin_prefix"`
	// Origins maps a log to the peer's origin for it, overriding
	// origin_prefix.
	Origins map[string]string `yaml:"origins"`
	// Logs restricts the comparison to these logs; default: every log both
	// have (the peer's GET /v1/logs).
	Logs []string `yaml:"logs"`
	// Token is a bearer token for a peer whose reads are protected.
	Token string `yaml:"token"`
	// TLSCAFile is a PEM bundle of the CAs an https peer's certificate
	// must chain to, instead of the system's. TLSClientCertFile and
	// TLSClientKeyFile (both or neither) are the client certificate
	// presented to a peer that requires one. See clientTLS (tls.go).
	TLSCAFile         string `yaml:"tls_ca_file"`
	TLSClientCertFile string `yaml:"tls_client_cert_file"`
	TLSClientKeyFile  string `yaml:"tls_client_key_file"`
}

// peers turns the configuration into checkers.Peers and refuses a peer
// without URL or key, a key that does not parse and a peer listed twice. A
// peer that signs with this instance's key (self, when not nil) is allowed,
// and logged with serve's logger: it is compared, and a fork with it puts
// the log read-only, unless it answers as this instance.
func (c PeersConfig) peers(self note.Verifier) ([]checkers.Peer, error) {
	if c.Interval < 0 {
		return nil, fmt.Errorf("config: checks.peers.interval must not be negative")
	}
	out := make([]checkers.Peer, 0, len(c.List))
	for i, pc := range c.List {
		key := strings.TrimSpace(pc.Key)
		if pc.KeyFile != "" {
			if key != "" {
				return nil, fmt.Errorf("config: checks.peers.list[%d]: key and key_file are exclusive", i)
			}
			b, _, err := keyfile.Read("peer key file", pc.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("config: checks.peers.list[%d]: %w", i, err)
			}
			key = strings.TrimSpace(string(b))
		}
		if key == "" {
			return nil, fmt.Errorf("config: checks.peers.list[%d] (%s): key or key_file is required", i, redact.URL(pc.URL))
		}
		v, err := note.NewVerifier(key)
		if err != nil {
			return nil, fmt.Errorf("config: checks.peers.list[%d] (%s): key: %w", i, redact.URL(pc.URL), err)
		}
		tc, err := clientTLS(fmt.Sprintf("checks.peers.list[%d] (%s)", i, redact.URL(pc.URL)), pc.TLSCAFile, pc.TLSClientCertFile, pc.TLSClientKeyFile)
		if err != nil {
			return nil, err
		}
		out = append(out, checkers.Peer{URL: pc.URL, Verifier: v, OriginPrefix: pc.OriginPrefix,
			Origins: pc.Origins, Logs: pc.Logs, Token: pc.Token, TLS: tc})
	}
	if err := checkers.ValidatePeers(out); err != nil {
		return nil, fmt.Errorf("config: checks.peers: %w", err)
	}
	for _, p := range out {
		if self != nil && c.logger != nil && p.Verifier.Name() == self.Name() && p.Verifier.KeyHash() == self.KeyHash() {
			c.logger.Info("peer signs with this instance's key: compared unless it answers as this instance; a fork with it puts the log read-only",
				"peer", redact.URL(p.URL), "instance", c.self.ID)
		}
	}
	return out, nil
}

// peerRate bounds the logs a peer cross-check compares per second (two
// requests to the peer each).
const peerRate = 100

// peerCheckers is the peer cross-check as the daemon schedules it, none
// without peers; the configuration is refused as peers refuses it. v
// verifies this instance's checkpoints.
func peerCheckers(store *ledger.Store, v note.Verifier, cfg PeersConfig) ([]scheduledChecker, error) {
	if len(cfg.List) == 0 {
		return nil, nil
	}
	ps, err := cfg.peers(v)
	if err != nil {
		return nil, err
	}
	logger := cfg.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	pc, err := checkers.NewPeerCheck(store, ps, checkers.WithInstance(cfg.self), checkers.WithPeerLogger(logger))
	if err != nil {
		return nil, err
	}
	return []scheduledChecker{{pc, checkers.Schedule{Interval: cfg.Interval, Jitter: cfg.Interval / 10, Rate: peerRate}}}, nil
}

// checkerCollectors returns the metrics of those of scs that export their
// own (the peer cross-check's comparisons), for registration beside the
// Runner's.
func checkerCollectors(scs []scheduledChecker) []prometheus.Collector {
	var out []prometheus.Collector
	for _, sc := range scs {
		if c, ok := sc.checker.(interface{ Collectors() []prometheus.Collector }); ok {
			out = append(out, c.Collectors()...)
		}
	}
	return out
}

// findingSeverity is the severity label of a check finding's alert: a
// peer that serves checkpoints its key does not verify is a warning (a
// rotated key, a wrong origin in the configuration); everything else,
// forks first, is critical.
func findingSeverity(kind string) string {
	if kind == ledger.IntegrityPeerCheckpointBad {
		return alert.SeverityWarning
	}
	return alert.SeverityCritical
}

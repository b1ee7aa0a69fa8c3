package checkers

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Peer is another server of signed checkpoints for logs this instance
// keeps: another auditd consuming the same partitions, or any server of
// C2SP checkpoints and consistency proofs at auditd's API paths
// (GET /v1/logs/{log}/checkpoint, /v1/logs/{log}/proof/consistency).
type Peer struct {
	// URL is the peer's base URL ("http://10.0.0.2:8080").
	URL string
	// Verifier checks the peer's checkpoints.
	Verifier note.Verifier
	// OriginPrefix is prepended to a log's name to give the origin the
	// peer's checkpoints of it must carry; empty means the verifier's
	// name and a slash, as auditd signs them ("<key name>/<log>").
	OriginPrefix string
	// Origins maps a log to the peer's origin for it, overriding
	// OriginPrefix.
	Origins map[string]string
	// Logs, if set, are the logs to compare (those this instance has);
	// otherwise those both list (the peer's GET /v1/logs).
	Logs []string
	// Token is a bearer token for a peer whose reads are protected.
	Token string
	// TLS, if set, configures https to the peer (a private CA, a client
	// certificate); nil uses Go's defaults.
	TLS *tls.Config
}

// Origin returns the origin the peer's checkpoints of log carry.
func (p Peer) Origin(log string) string {
	if o, ok := p.Origins[log]; ok {
		return o
	}
	if p.OriginPrefix != "" {
		return p.OriginPrefix + log
	}
	return p.Verifier.Name() + "/" + log
}

// key identifies a peer: its URL.
func (p Peer) key() string { return strings.TrimRight(p.URL, "/") }

// shown is the peer's URL as logs, metrics, findings and errors show it:
// without its password (redact.URL).
func (p Peer) shown() string { return redact.URL(p.URL) }

// ErrPeerConfig reports a peer list that cannot be checked: a peer listed
// twice, a peer without URL or key.
var ErrPeerConfig = errors.New("checkers: peer configuration")

// ValidatePeers checks a peer list: no peer without an http(s) URL or a
// verifier, none listed twice (same URL). Peers with the same key and
// origins as each other or as this instance are allowed: several instances
// signing one log with one key (a split brain, or a copied data directory)
// is what the check must compare, and at check time a peer that answers
// with this instance's identity is told apart and skipped (WithInstance).
func ValidatePeers(peers []Peer) error {
	seen := map[string]int{}
	for i, p := range peers {
		if p.URL == "" || p.Verifier == nil {
			return fmt.Errorf("%w: peer %d: url and key are required", ErrPeerConfig, i)
		}
		if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: peer %d: url %q is not an http(s) URL", ErrPeerConfig, i, redact.URL(p.URL))
		}
		if j, ok := seen[p.key()]; ok {
			return fmt.Errorf("%w: peer %d (%s) is listed twice (also peer %d)", ErrPeerConfig, i, redact.URL(p.URL), j)
		}
		seen[p.key()] = i
	}
	return nil
}

// verifierID is a verifier's name and key hash.
func verifierID(v note.Verifier) string { return fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash()) }

// PeerCheck cross-checks this instance's logs with its peers' checkpoints
// (name "peers"). For each log both have, it fetches the peer's latest
// checkpoint and verifies its signature and origin (else a finding of kind
// peer_checkpoint_bad), then checks the two signed trees are one history:
// equal roots at equal sizes, and a consistency proof from the smaller to
// the larger, built from this instance's tree when its checkpoint is the
// larger and fetched from the peer (and verified) when the peer's is. Two
// checkpoints that cannot both be true are a finding of kind fork, with
// both signed notes as its evidence. When the peer's checkpoint is signed
// by this instance's own key for this log's origin (two instances signing
// with one key), the fork is evidence that this log published two
// histories: the check also puts the log read-only (ledger.Log.Forked),
// which raises the ledger's own integrity alert. A peer that answers with
// this instance's identity (WithInstance) is this instance, and is not
// compared. A peer that cannot be reached or
// answers something that is not a checkpoint or a proof is an error of the
// pass, never a finding; the other peers are checked all the same.
//
// It remembers, in the store's "peers" bucket, the largest checkpoint each
// peer served for each log, and reports a peer whose checkpoint is smaller
// than that, or that the remembered one is not a prefix of, as a finding
// of kind peer_rollback (see checkHistory).
type PeerCheck struct {
	store *ledger.Store
	peers []Peer
	http  *http.Client
	// tlsHTTP holds the clients of the peers with a TLS configuration,
	// by peer key; the others use http.
	tlsHTTP map[string]*http.Client
	m       *peerMetrics
	// history remembers the largest checkpoint each peer served, by
	// peer and log (see checkHistory).
	history *ledger.Bucket
	self    Instance
	log     *slog.Logger

	mu sync.Mutex
	// identities holds what each peer's last answer said of its identity
	// (see peerIdentity), by peer key.
	identities map[string]string
	// reported holds the fork evidence given to ledger.Log.Forked, by
	// peer and log (see forked).
	reported map[string]string
}

var _ Checker = (*PeerCheck)(nil)

// NewPeerCheck returns the cross-check of store's logs with peers. It
// refuses a peer list ValidatePeers refuses.
func NewPeerCheck(store *ledger.Store, peers []Peer, opts ...PeerOption) (*PeerCheck, error) {
	if err := ValidatePeers(peers); err != nil {
		return nil, err
	}
	history, err := store.Bucket(peerHistoryBucket)
	if err != nil {
		return nil, err
	}
	c := &PeerCheck{store: store, peers: peers, http: &http.Client{Timeout: 30 * time.Second, CheckRedirect: redirect.SameOrigin}, m: newPeerMetrics(peers),
		history: history, log: slog.Default(), identities: map[string]string{}, reported: map[string]string{}}
	for _, o := range opts {
		o(c)
	}
	for _, p := range peers {
		if p.TLS != nil {
			if c.tlsHTTP == nil {
				c.tlsHTTP = map[string]*http.Client{}
			}
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.TLSClientConfig = p.TLS
			c.tlsHTTP[p.key()] = &http.Client{Timeout: c.http.Timeout, Transport: t, CheckRedirect: redirect.SameOrigin}
		}
	}
	return c, nil
}

// httpFor is the HTTP client of requests to peer.
func (c *PeerCheck) httpFor(peer Peer) *http.Client {
	if h, ok := c.tlsHTTP[peer.key()]; ok {
		return h
	}
	return c.http
}

// Comparison results, the result label of peer_comparisons_total.
const (
	peerAgree    = "agree"    // one history: equal roots, or a verified consistency proof
	peerFork     = "fork"     // a finding of kind fork
	peerBad      = "bad"      // a finding of kind peer_checkpoint_bad
	peerRollback = "rollback" // a finding of kind peer_rollback (and no fork)
	peerUnsigned = "unsigned" // one side has signed nothing yet
	peerSelf     = "self"     // the peer is this instance: not compared
	peerError    = "error"    // the peer could not be reached or answered garbage
)

// peerMetrics say what the cross-check compared, by peer (the configured
// URL without its password, Peer.shown: a bounded label).
type peerMetrics struct {
	comparisons *prometheus.CounterVec
	agreed      *prometheus.GaugeVec
}

func newPeerMetrics(peers []Peer) *peerMetrics {
	m := &peerMetrics{
		comparisons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "peer_comparisons_total",
			Help: "Logs compared with a peer's signed checkpoint, by peer and result: agree, fork, bad (checkpoint does not verify), rollback (behind or off what the peer signed before), unsigned (nothing to compare yet), self (the peer is this instance: not compared), error.",
		}, []string{"peer", "result"}),
		agreed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "peer_agreed_size",
			Help: "Size of the common prefix (the smaller checkpoint) of the last comparison with the peer that agreed.",
		}, []string{"peer"}),
	}
	for _, p := range peers {
		for _, r := range []string{peerAgree, peerFork, peerBad, peerRollback, peerUnsigned, peerSelf, peerError} {
			m.comparisons.WithLabelValues(p.shown(), r)
		}
	}
	return m
}

// Collectors returns the cross-check's metrics, for registration (with
// the auditd_ prefix).
func (c *PeerCheck) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.m.comparisons, c.m.agreed}
}

// Name implements Checker.
func (c *PeerCheck) Name() string { return "peers" }

// Run implements Checker.
func (c *PeerCheck) Run(ctx context.Context, p Progress) error {
	var errs []error
	for _, peer := range c.peers {
		if err := c.runPeer(ctx, peer, p); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Errors of the peer's client or of net/http may quote the
			// URL or its password their own way.
			errs = append(errs, redact.Error(fmt.Errorf("peer %s: %w", peer.shown(), err), peer.URL))
		}
	}
	return errors.Join(errs...)
}

func (c *PeerCheck) runPeer(ctx context.Context, peer Peer, p Progress) error {
	cl := client.New(peer.URL, peer.Verifier, client.WithTLSConfig(peer.TLS), client.WithToken(peer.Token))
	ours := map[string]bool{}
	for _, l := range c.store.Logs() {
		ours[l.Name] = true
	}
	logs := peer.Logs
	if len(logs) == 0 {
		theirs, err := cl.Logs(ctx)
		if err != nil {
			return fmt.Errorf("list logs: %w", err)
		}
		logs = theirs
	}
	var errs []error
	for _, name := range logs {
		if !ours[name] {
			continue
		}
		if err := p.Checked(ctx, 0); err != nil {
			return err
		}
		if err := c.checkLog(ctx, cl, peer, name, p); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// checkLog compares one log's latest checkpoints, ours and the peer's.
// Each comparison is counted by result; one that agrees sets the peer's
// agreed size.
func (c *PeerCheck) checkLog(ctx context.Context, cl *client.Client, peer Peer, name string, p Progress) (err error) {
	result, agreed := peerError, uint64(0)
	defer func() {
		if ctx.Err() != nil && err != nil {
			return // stopped, not compared
		}
		c.m.comparisons.WithLabelValues(peer.shown(), result).Inc()
		if result == peerAgree {
			c.m.agreed.WithLabelValues(peer.shown()).Set(float64(agreed))
		}
	}()
	l, err := c.store.Log(name)
	if err != nil {
		return err
	}
	mine := l.Checkpoint()
	if mine == nil {
		result = peerUnsigned
		return nil // nothing signed yet: nothing to compare
	}
	raw, who, err := c.fetchCheckpoint(ctx, peer, name)
	if err != nil {
		return err
	}
	if c.peerIdentity(peer, who) == "self" {
		result = peerSelf
		return nil // this instance, through its own URL: it agrees with itself
	}
	if raw == nil {
		result = peerUnsigned
		return nil // the peer has signed nothing yet: nothing to compare
	}
	theirs, bad, err := openPeerCheckpoint(raw, peer.Verifier, peer.Origin(name))
	if err != nil {
		return err
	}
	if bad != "" {
		result = peerBad
		p.Found(Finding{Log: name, Kind: ledger.IntegrityPeerCheckpointBad,
			Detail:   fmt.Sprintf("peer %s: %s", peer.shown(), bad),
			Evidence: []string{string(raw)}})
		return nil
	}
	grew, rolledBack, err := c.checkHistory(ctx, cl, peer, name, theirs, raw, p)
	if err != nil {
		return err
	}
	result, agreed = peerAgree, min(mine.Size, theirs.Size)
	if rolledBack {
		result = peerRollback
	}
	detail, err := forkBetween(ctx, cl, l, name, mine, theirs)
	if err != nil {
		result = peerError
		return err
	}
	if detail != "" {
		result = peerFork
		p.Found(Finding{Log: name, Checkpoint: At(theirs.Size), Kind: ledger.IntegrityFork,
			Detail: fmt.Sprintf("peer %s: our checkpoint of size %d (root %s) and the peer's of size %d (root %s) cannot both be true: %s",
				peer.shown(), mine.Size, mine.Root, theirs.Size, theirs.Root, detail),
			Evidence: []string{string(mine.Note), string(raw)}})
		if signedByUs(peer, mine, theirs) {
			c.forked(l, peer, mine, theirs, detail)
		}
	}
	if grew && result == peerAgree {
		return c.remember(peer, name, raw)
	}
	return nil
}

// forkBetween says why our checkpoint mine of log l and the peer's theirs
// cannot both be true, or "" when they are one history: equal roots at
// equal sizes, or a consistency proof from the smaller to the larger, ours
// when ours is larger, the peer's (fetched with cl) when its is. A proof
// that cannot be built, fetched or decoded is an error; one that decodes
// and does not verify is a fork.
func forkBetween(ctx context.Context, cl *client.Client, l *ledger.Log, name string, mine, theirs *ledger.SignedCheckpoint) (string, error) {
	switch {
	case mine.Size == theirs.Size:
		if mine.Root != theirs.Root {
			return "equal sizes, different roots", nil
		}
	case theirs.Size == 0 || mine.Size == 0:
		// The empty tree is a prefix of every tree, if its root is the
		// empty tree's.
		small := theirs.Checkpoint
		if mine.Size == 0 {
			small = mine.Checkpoint
		}
		if small.Root != merkle.EmptyRoot() {
			return "a checkpoint of the empty tree with a non-empty root", nil
		}
	case theirs.Size < mine.Size:
		// Ours is larger: prove from our own tree.
		proof, err := l.ConsistencyProof(theirs.Size, mine.Size)
		if err != nil {
			return "", fmt.Errorf("our consistency proof from %d to %d: %w", theirs.Size, mine.Size, err)
		}
		if err := merkle.VerifyConsistency(theirs.Size, mine.Size, proof, theirs.Root, mine.Root); err != nil {
			return fmt.Sprintf("our tree's consistency proof from size %d does not verify: %v", theirs.Size, err), nil
		}
	default:
		// The peer's is larger: its proof. One that does not decode is an
		// error; one that decodes and does not verify is the peer's
		// signed tree failing to extend ours.
		proof, err := cl.ConsistencyProof(ctx, name, mine.Size, theirs.Size)
		if err != nil {
			return "", fmt.Errorf("peer's consistency proof from %d to %d: %w", mine.Size, theirs.Size, err)
		}
		if err := merkle.VerifyConsistency(mine.Size, theirs.Size, proof, mine.Root, theirs.Root); err != nil {
			return fmt.Sprintf("the peer's consistency proof from size %d does not verify: %v", mine.Size, err), nil
		}
	}
	return "", nil
}

// maxCheckpointBytes bounds a peer's checkpoint note.
const maxCheckpointBytes = 64 << 10

// fetchCheckpoint returns the peer's latest checkpoint of the log, nil if
// it has signed none yet, and the headers of the answer (which name the
// instance that answered, see Instance).
func (c *PeerCheck) fetchCheckpoint(ctx context.Context, peer Peer, name string) ([]byte, http.Header, error) {
	u := strings.TrimRight(peer.URL, "/") + "/v1/logs/" + url.PathEscape(name) + "/checkpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	if peer.Token != "" {
		req.Header.Set("Authorization", "Bearer "+peer.Token)
	}
	resp, err := c.httpFor(peer).Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCheckpointBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", redact.URL(u), err)
	}
	if resp.StatusCode == http.StatusNotFound {
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(b, &e) == nil && e.Code == "no_checkpoint" {
			return nil, resp.Header, nil // a log the peer has not signed yet
		}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s", redact.URL(u), resp.Status)
	}
	if len(b) > maxCheckpointBytes {
		return nil, nil, fmt.Errorf("GET %s: checkpoint larger than %d bytes", redact.URL(u), maxCheckpointBytes)
	}
	return b, resp.Header, nil
}

// forked puts l read-only (ledger.Log.Forked) on the peer's checkpoint
// theirs, which our key signed and which contradicts ours, mine: positive
// evidence that this log published two histories, so it signs nothing
// more. Forked records it as an integrity failure of kind fork, which
// serve raises as the alert integrity/<log>/fork, beside this finding's
// integrity/checks/peers/<log>/fork: both fire, on purpose. The finding's
// alert is the check's (resolved when a complete pass no longer finds the
// fork); the ledger's says the log is read-only and stays until an
// operator recovers it. Each piece of evidence (peer, log, both
// checkpoints) is given to Forked once per process, not on every pass that
// finds it again: the log's state would not change, and Forked appends it
// to the log's durable fork mark each time.
func (c *PeerCheck) forked(l *ledger.Log, peer Peer, mine, theirs *ledger.SignedCheckpoint, detail string) {
	k, ev := string(historyKey(peer, l.Name())), fmt.Sprintf("%d %s %d %s", mine.Size, mine.Root, theirs.Size, theirs.Root)
	c.mu.Lock()
	same := c.reported[k] == ev
	c.reported[k] = ev
	c.mu.Unlock()
	if same {
		return
	}
	l.Forked("peer "+peer.shown(), fmt.Sprintf(
		"our checkpoint of size %d (root %s) and the peer's of size %d (root %s), both signed by this instance's key, cannot both be true: %s",
		mine.Size, mine.Root, theirs.Size, theirs.Root, detail))
}

// signedByUs reports whether the peer's checkpoint theirs (verified with the
// peer's key) is signed by the key that signed ours, mine, for the same
// origin: the peer's key verifies our own note. Then one key signed two
// histories of the log.
func signedByUs(peer Peer, mine, theirs *ledger.SignedCheckpoint) bool {
	if theirs.Origin != mine.Origin {
		return false
	}
	_, err := merkle.OpenNote(mine.Note, note.VerifierList(peer.Verifier))
	return err == nil
}

// openPeerCheckpoint verifies a peer's signed checkpoint. A note that is
// not a signed checkpoint at all (garbage) is err; a well-formed one whose
// signature does not verify with the peer's key, or that is signed for
// another origin, is bad (a finding: the peer signs, or serves, what it
// should not).
func openPeerCheckpoint(raw []byte, v note.Verifier, origin string) (cp *ledger.SignedCheckpoint, bad string, err error) {
	n, err := merkle.OpenNote(raw, note.VerifierList(v))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return nil, fmt.Sprintf("checkpoint carries no signature by %s", verifierID(v)), nil
	case errors.As(err, &invalid):
		return nil, fmt.Sprintf("checkpoint signature by %s does not verify", verifierID(v)), nil
	case err != nil:
		return nil, "", fmt.Errorf("checkpoint is not a signed note: %w", err)
	}
	c, err := merkle.ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return nil, "", fmt.Errorf("signed note is not a checkpoint: %w", err)
	}
	if c.Origin != origin {
		return nil, fmt.Sprintf("checkpoint signed for origin %q, want %q", c.Origin, origin), nil
	}
	return &ledger.SignedCheckpoint{Checkpoint: c, Note: raw}, "", nil
}

// FindingKinds are the kinds a peer check reports.
func (c *PeerCheck) FindingKinds() []string {
	return []string{ledger.IntegrityFork, ledger.IntegrityPeerCheckpointBad, IntegrityPeerRollback}
}

// Package client is a Go client for auditd's proof API that trusts nothing
// it did not check: checkpoints are verified against the log's verifier
// key, leaves are recomputed from the entry's fields, and every proof is
// checked against a verified checkpoint.
package client

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/witness"
)

// ErrVerification marks a failed check: a bad signature, a leaf that does
// not match its fields, a proof that does not verify.
var ErrVerification = errors.New("verification failed")

func verifyErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrVerification, fmt.Sprintf(format, args...))
}

// Client talks to one auditd server.
type Client struct {
	base     string
	http     *http.Client
	verifier note.Verifier
	token    string
	policy   *witness.Policy // witness.go
	tls      *tls.Config
	gzip     int // bundles.go: bundle compression, 0 auto, 1 on, -1 off
	// noCombined is set once the server answered that it serves no
	// combined bundles (bundles.go).
	noCombined atomic.Bool
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends a bearer token, for servers whose reads are protected.
func WithToken(t string) Option { return func(c *Client) { c.token = t } }

// WithHTTPClient sends requests through h instead of the client's own (a
// 30-second timeout, up to 32 idle connections to the server).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTLSConfig makes the client's own transport use t for https:// URLs:
// to trust a private CA (RootCAs) or present a client certificate. It has
// no effect with WithHTTPClient, whose transport is used as it is.
func WithTLSConfig(t *tls.Config) Option { return func(c *Client) { c.tls = t } }

// New returns a client for the server at base (for example
// "http://127.0.0.1:8080" or "https://audit.example.com"), checking
// checkpoints with v.
func New(base string, v note.Verifier, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(base, "/"), verifier: v}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		// Remote verification keeps several page and proof requests in
		// flight per log; the default transport keeps only 2 idle
		// connections per host and would open and close the rest each
		// time.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 32
		if c.tls != nil {
			t.TLSClientConfig = c.tls
		}
		c.http = &http.Client{Timeout: 30 * time.Second, Transport: t, CheckRedirect: redirect.SameOrigin}
	}
	return c
}

// Origin returns the checkpoint origin of log under the client's key.
func (c *Client) Origin(log string) string { return c.verifier.Name() + "/" + log }

func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	b, _, err := c.getHeader(ctx, path, q, false)
	return b, err
}

// getHeader is get, returning the response's header too (with an error
// status as well). With identity it asks for the body uncompressed (the
// transport asks for gzip otherwise).
func (c *Client) getHeader(ctx context.Context, path string, q url.Values, identity bool) ([]byte, http.Header, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, redact.Error(err, c.base) // a parse error quotes the URL
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if identity {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// net/http hides the password, not a token in the query.
		return nil, nil, redact.Error(err, c.base)
	}
	defer resp.Body.Close()
	b, err := readBody(resp, 64<<20)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", redact.URL(u), err)
	}
	if resp.StatusCode != http.StatusOK {
		status := errors.New(resp.Status)
		if resp.StatusCode == http.StatusNotFound {
			status = fmt.Errorf("%w (%s)", ErrNotFound, resp.Status)
		}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, resp.Header, fmt.Errorf("GET %s: %w: %s", redact.URL(u), status, e.Error)
		}
		return nil, resp.Header, fmt.Errorf("GET %s: %w", redact.URL(u), status)
	}
	return b, resp.Header, nil
}

// readBody reads resp's body, up to limit bytes: into one buffer of its
// Content-Length when the server sent one (bundles, tiles), not one grown
// by doubling.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > limit || resp.Uncompressed {
		return io.ReadAll(io.LimitReader(resp.Body, limit))
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return nil, err
	}
	return b, nil
}

func logPath(log string) string { return "/v1/logs/" + url.PathEscape(log) }

// Checkpoint fetches the log's latest checkpoint and verifies its signature
// and origin.
func (c *Client) Checkpoint(ctx context.Context, log string) (merkle.Checkpoint, []byte, error) {
	b, err := c.get(ctx, logPath(log)+"/checkpoint", nil)
	if err != nil {
		return merkle.Checkpoint{}, nil, err
	}
	cp, err := c.OpenCheckpoint(b, log)
	if err == nil {
		err = c.checkWitnesses(b, log) // witness.go
	}
	return cp, b, err
}

// OpenCheckpoint verifies a signed checkpoint of log with the client's key.
func (c *Client) OpenCheckpoint(signed []byte, log string) (merkle.Checkpoint, error) {
	cp, err := merkle.OpenCheckpoint(signed, c.verifier, c.Origin(log))
	if err != nil {
		if why := keyMismatch(signed, c.verifier); why != "" { // signers.go
			return cp, verifyErr("checkpoint of %s: %v; %s", log, err, why)
		}
		return cp, verifyErr("checkpoint of %s: %v", log, err)
	}
	return cp, nil
}

// Entry is an entry as the API returns it (GET /v1/logs/{log}/entries/...);
// the server renders its entries with this type.
type Entry struct {
	Index         uint64          `json:"index"`
	ID            string          `json:"id"`
	Key           *string         `json:"key,omitempty"`
	KeyBase64     *string         `json:"key_base64,omitempty"`
	Time          string          `json:"time"`
	TimeAssigned  bool            `json:"time_assigned"`
	Source        *merkle.Source  `json:"source,omitempty"`
	Headers       []merkle.Header `json:"headers,omitempty"`
	Marks         []string        `json:"marks,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
	PayloadPruned bool            `json:"payload_pruned,omitempty"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Leaf          string          `json:"leaf"`
	LeafHash      merkle.Hash     `json:"leaf_hash"`
	// LedgeredAt is when the server ledgered the entry (GET of one entry
	// only, and only where the server recorded it). The tree does not
	// commit to it: it says when, not what, and a drift check's grace
	// period counts from it.
	LedgeredAt *time.Time `json:"ledgered_at,omitempty"`
}

// Entry fetches the entry at index.
func (c *Client) Entry(ctx context.Context, log string, index uint64) (*Entry, error) {
	return c.entry(ctx, logPath(log)+"/entries/"+strconv.FormatUint(index, 10), nil)
}

// EntryByID fetches the entry with the given event id.
func (c *Client) EntryByID(ctx context.Context, log, id string) (*Entry, error) {
	return c.entry(ctx, logPath(log)+"/entries", url.Values{"id": {id}})
}

func (c *Client) entry(ctx context.Context, path string, q url.Values) (*Entry, error) {
	if q == nil {
		q = url.Values{}
	}
	// Base64 keeps the payload's exact bytes whatever JSON library reads it.
	q.Set("payload", "base64")
	b, err := c.get(ctx, path, q)
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("entry: %w", err)
	}
	return &e, nil
}

// RecomputeLeaf rebuilds the entry's leaf of log from its fields alone,
// checks it against the leaf bytes and hash the server sent, and returns
// the leaf hash.
func (e *Entry) RecomputeLeaf(log string) (merkle.Hash, error) {
	_, _, h, err := e.Decode(log)
	return h, err
}

// Decode rebuilds the entry's leaf of log from its fields, checks it against
// the leaf bytes and hash the server sent, and returns the leaf, the payload
// (nil if pruned) and the leaf hash.
func (e *Entry) Decode(log string) (*merkle.Leaf, []byte, merkle.Hash, error) {
	fail := func(format string, args ...any) (*merkle.Leaf, []byte, merkle.Hash, error) {
		return nil, nil, merkle.Hash{}, verifyErr(format, args...)
	}
	t, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		return fail("entry %d: time %q: %v", e.Index, e.Time, err)
	}
	marks, err := merkle.ParseMarks(e.Marks)
	if err != nil {
		return fail("entry %d: %v", e.Index, err)
	}
	l := &merkle.Leaf{Log: log, ID: e.ID, Time: t.UnixNano(), TimeAssigned: e.TimeAssigned, Source: e.Source, Headers: e.Headers, Marks: marks}
	switch {
	case e.Key != nil:
		l.HasKey, l.Key = true, []byte(*e.Key)
	case e.KeyBase64 != nil:
		k, err := base64.StdEncoding.DecodeString(*e.KeyBase64)
		if err != nil {
			return fail("entry %d: key_base64: %v", e.Index, err)
		}
		l.HasKey, l.Key = true, k
	}
	var payload []byte
	switch {
	case e.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*e.PayloadBase64)
		if err != nil {
			return fail("entry %d: payload_base64: %v", e.Index, err)
		}
		payload = p
		l.PayloadSHA256 = sha256.Sum256(p)
	case e.Payload != nil:
		payload = e.Payload
		l.PayloadSHA256 = sha256.Sum256(e.Payload)
	case e.PayloadPruned:
		// Only the hash is left; it is committed to by the leaf.
		h, err := base64.StdEncoding.DecodeString(e.PayloadSHA256)
		if err != nil || len(h) != merkle.HashSize {
			return fail("entry %d: payload_sha256 %q", e.Index, e.PayloadSHA256)
		}
		copy(l.PayloadSHA256[:], h)
	default:
		return fail("entry %d: no payload", e.Index)
	}
	lb, err := l.MarshalBinary()
	if err != nil {
		return fail("entry %d: %v", e.Index, err)
	}
	if sent, err := base64.StdEncoding.DecodeString(e.Leaf); err != nil || string(sent) != string(lb) {
		return fail("entry %d: leaf bytes from the server differ from the leaf recomputed from its fields", e.Index)
	}
	h := merkle.LeafHash(lb)
	if h != e.LeafHash {
		return fail("entry %d: leaf hash %s, recomputed %s", e.Index, e.LeafHash, h)
	}
	return l, payload, h, nil
}

// Entries fetches the entries [start, end) of log; the server may return
// fewer (at most 10,000 at a time, and none beyond its tree size).
func (c *Client) Entries(ctx context.Context, log string, start, end uint64) ([]Entry, error) {
	b, err := c.get(ctx, logPath(log)+"/entries", url.Values{
		"start": {strconv.FormatUint(start, 10)}, "end": {strconv.FormatUint(end, 10)}, "payload": {"base64"}})
	if err != nil {
		return nil, err
	}
	var out struct {
		Entries []Entry `json:"entries"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	for i := range out.Entries {
		if want := start + uint64(i); out.Entries[i].Index != want {
			return nil, verifyErr("entries of %s: got index %d at position %d, want %d", log, out.Entries[i].Index, i, want)
		}
	}
	return out.Entries, nil
}

// InclusionProof fetches the inclusion proof of index in the tree of size.
func (c *Client) InclusionProof(ctx context.Context, log string, index, size uint64) ([]merkle.Hash, error) {
	b, err := c.get(ctx, logPath(log)+"/proof/inclusion", url.Values{
		"index": {strconv.FormatUint(index, 10)}, "size": {strconv.FormatUint(size, 10)}})
	if err != nil {
		return nil, err
	}
	var p struct {
		Hashes []merkle.Hash `json:"hashes"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("inclusion proof: %w", err)
	}
	return p.Hashes, nil
}

// ConsistencyProof fetches the consistency proof from size from to size to.
func (c *Client) ConsistencyProof(ctx context.Context, log string, from, to uint64) ([]merkle.Hash, error) {
	b, err := c.get(ctx, logPath(log)+"/proof/consistency", url.Values{
		"from": {strconv.FormatUint(from, 10)}, "to": {strconv.FormatUint(to, 10)}})
	if err != nil {
		return nil, err
	}
	var p struct {
		Hashes []merkle.Hash `json:"hashes"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("consistency proof: %w", err)
	}
	return p.Hashes, nil
}

// ProveEntry recomputes e's leaf and verifies its inclusion in the
// checkpoint cp, which the caller has verified.
func (c *Client) ProveEntry(ctx context.Context, log string, e *Entry, cp merkle.Checkpoint) error {
	h, err := e.RecomputeLeaf(log)
	if err != nil {
		return err
	}
	if e.Index >= cp.Size {
		return fmt.Errorf("entry %d is not covered by the checkpoint of size %d yet", e.Index, cp.Size)
	}
	p, err := c.InclusionProof(ctx, log, e.Index, cp.Size)
	if err != nil {
		return err
	}
	if err := merkle.VerifyInclusion(e.Index, cp.Size, h, p, cp.Root); err != nil {
		return verifyErr("%v", err)
	}
	return nil
}

// ProveConsistency verifies that checkpoint newer extends checkpoint older.
func (c *Client) ProveConsistency(ctx context.Context, log string, older, newer merkle.Checkpoint) error {
	if older.Size > newer.Size {
		return verifyErr("checkpoint of size %d is older than the one of size %d", newer.Size, older.Size)
	}
	if older.Size == 0 {
		return nil // the empty tree is a prefix of every tree
	}
	if older.Size == newer.Size {
		if older.Root != newer.Root {
			return verifyErr("two checkpoints of size %d with different roots (fork)", older.Size)
		}
		return nil
	}
	p, err := c.ConsistencyProof(ctx, log, older.Size, newer.Size)
	if err != nil {
		return err
	}
	if err := merkle.VerifyConsistency(older.Size, newer.Size, p, older.Root, newer.Root); err != nil {
		return verifyErr("%v", err)
	}
	return nil
}

// Logs lists the names of the server's logs, following its pages.
func (c *Client) Logs(ctx context.Context) ([]string, error) {
	var names []string
	var q url.Values
	for {
		b, err := c.get(ctx, "/v1/logs", q)
		if err != nil {
			return nil, err
		}
		var out []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("logs: %w", err)
		}
		after := q.Get("after")
		for _, l := range out {
			if q != nil && l.Name <= after {
				return names, nil // a server without pages answered the whole list again
			}
			names = append(names, l.Name)
		}
		if len(out) < logsPage {
			return names, nil
		}
		q = url.Values{"after": {out[len(out)-1].Name}}
	}
}

// logsPage is the server's page of GET /v1/logs: a shorter page is the last.
const logsPage = 1000

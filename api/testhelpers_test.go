package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// testKeyName is the signer name of test servers; the checkpoint origin of
// log L is testKeyName + "/" + L.
const testKeyName = "auditd-test.example"

// testEnv is an api.Server over a real ledger.Store in a temporary
// directory, served by a real HTTP server on loopback.
type testEnv struct {
	t        testing.TB
	store    *ledger.Store
	server   *api.Server
	http     *httptest.Server
	verifier note.Verifier
	vkey     string
	reg      *prometheus.Registry
	// token is sent on every request made through the env's helpers
	// (except do, which sends exactly the headers it is given).
	token string
}

// envConfig configures newTestEnv.
type envConfig struct {
	opts    api.Options
	metrics bool     // serve /metrics over a registry holding the store and server collectors
	logs    []string // logs created before the server starts
	// cpInterval is the store's checkpoint interval (default 10ms).
	cpInterval time.Duration
}

// newTestEnv starts a server. The store and server are closed when the test
// ends (the HTTP server first).
func newTestEnv(t testing.TB, cfg envConfig) *testEnv {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	if cfg.cpInterval == 0 {
		cfg.cpInterval = 10 * time.Millisecond
	}
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(testKeyName),
		ledgertest.WithLedger(ledger.WithCheckpointInterval(cfg.cpInterval)))
	verifier, vkey := key.Verifier, key.VKey
	for _, name := range cfg.logs {
		if _, err := store.CreateLog(name); err != nil {
			t.Fatal(err)
		}
	}
	env := &testEnv{t: t, store: store, verifier: verifier, vkey: vkey, reg: prometheus.NewRegistry()}
	opts := cfg.opts
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	if cfg.metrics {
		opts.Components.Metrics = promhttp.HandlerFor(env.reg, promhttp.HandlerOpts{Registry: env.reg})
	}
	env.server = api.New(store, vkey, opts)
	if cfg.metrics {
		r := prometheus.WrapRegistererWithPrefix("auditd_", env.reg)
		for _, c := range store.Collectors() {
			r.MustRegister(c)
		}
		for _, c := range env.server.Collectors() {
			r.MustRegister(c)
		}
	}
	env.http = httptest.NewServer(env.server)
	t.Cleanup(env.http.Close)
	return env
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("%d %s %q", r.status, r.header.Get("Content-Type"), r.body)
}

// do sends one request with exactly the given headers ("Name: value").
func (e *testEnv) do(method, path string, body io.Reader, headers ...string) response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.http.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ": ")
		if !ok {
			e.t.Fatalf("bad header %q", h)
		}
		req.Header.Set(k, v)
	}
	res, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (e *testEnv) auth() []string {
	if e.token == "" {
		return nil
	}
	return []string{"Authorization: Bearer " + e.token}
}

// get GETs path (with the env's token) and requires the given status.
func (e *testEnv) get(path string, status int) response {
	e.t.Helper()
	r := e.do(http.MethodGet, path, nil, e.auth()...)
	if r.status != status {
		e.t.Fatalf("GET %s: got %v, want status %d", path, r, status)
	}
	return r
}

// getJSON GETs path, requires 200 and application/json, and decodes the
// body into v.
func (e *testEnv) getJSON(path string, v any) response {
	e.t.Helper()
	r := e.get(path, http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("GET %s: Content-Type %q, want application/json", path, ct)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			e.t.Fatalf("GET %s: decode %q: %v", path, r.body, err)
		}
	}
	return r
}

// post POSTs body to the log's entries (query may be ""), requires 200 and
// decodes the result.
func (e *testEnv) post(log, query, body string) (appendResult, response) {
	e.t.Helper()
	path := "/v1/logs/" + log + "/entries"
	if query != "" {
		path += "?" + query
	}
	r := e.do(http.MethodPost, path, strings.NewReader(body), e.auth()...)
	if r.status != http.StatusOK {
		e.t.Fatalf("POST %s: got %v, want 200", path, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("POST %s: Content-Type %q", path, ct)
	}
	var out appendResult
	if err := json.Unmarshal(r.body, &out); err != nil {
		e.t.Fatalf("POST %s: decode %q: %v", path, r.body, err)
	}
	return out, r
}

// logsSnapshot returns the body of GET /v1/logs: every log's name, size
// and root.
func (e *testEnv) logsSnapshot() string {
	e.t.Helper()
	return string(e.getJSON("/v1/logs", nil).body)
}

// appendResult is the JSON of a POST response.
type appendResult struct {
	Size    uint64 `json:"size"`
	Entries []struct {
		Index          uint64        `json:"index"`
		ID             string        `json:"id"`
		LeafHash       merkle.Hash   `json:"leaf_hash"`
		Duplicate      bool          `json:"duplicate"`
		InclusionProof []merkle.Hash `json:"inclusion_proof"`
	} `json:"entries"`
	Checkpoint string `json:"checkpoint"`
}

// entryJSON is the JSON of GET .../entries/{index}, read the way a third
// party would: the payload's exact bytes are kept.
type entryJSON struct {
	Index         uint64          `json:"index"`
	ID            string          `json:"id"`
	Key           *string         `json:"key"`
	KeyBase64     *string         `json:"key_base64"`
	Time          string          `json:"time"`
	TimeAssigned  bool            `json:"time_assigned"`
	Payload       json.RawMessage `json:"payload"`
	PayloadBase64 *string         `json:"payload_base64"`
	PayloadPruned bool            `json:"payload_pruned"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Leaf          string          `json:"leaf"`
	LeafHash      merkle.Hash     `json:"leaf_hash"`
}

// recomputeLeaf rebuilds an entry's leaf from its JSON fields alone, as a
// third party would, and checks it against the served leaf, leaf hash and
// payload hash. It returns the payload bytes.
func recomputeLeaf(t testing.TB, log string, e entryJSON) []byte {
	t.Helper()
	var payload []byte
	switch {
	case e.Payload != nil && e.PayloadBase64 != nil:
		t.Fatalf("entry %d: both payload and payload_base64", e.Index)
	case e.Payload != nil:
		payload = e.Payload
	case e.PayloadBase64 != nil:
		p, err := base64.StdEncoding.DecodeString(*e.PayloadBase64)
		if err != nil {
			t.Fatalf("entry %d: payload_base64: %v", e.Index, err)
		}
		payload = p
	default:
		t.Fatalf("entry %d: no payload", e.Index)
	}
	ts, err := time.Parse(time.RFC3339Nano, e.Time)
	if err != nil {
		t.Fatalf("entry %d: time %q: %v", e.Index, e.Time, err)
	}
	leaf := merkle.Leaf{Log: log, ID: e.ID, Time: ts.UnixNano(), TimeAssigned: e.TimeAssigned, PayloadSHA256: sha256.Sum256(payload)}
	switch {
	case e.Key != nil && e.KeyBase64 != nil:
		t.Fatalf("entry %d: both key and key_base64", e.Index)
	case e.Key != nil:
		leaf.HasKey, leaf.Key = true, []byte(*e.Key)
	case e.KeyBase64 != nil:
		k, err := base64.StdEncoding.DecodeString(*e.KeyBase64)
		if err != nil {
			t.Fatalf("entry %d: key_base64: %v", e.Index, err)
		}
		leaf.HasKey, leaf.Key = true, k
	}
	lb, err := leaf.MarshalBinary()
	if err != nil {
		t.Fatalf("entry %d: encode leaf: %v", e.Index, err)
	}
	served, err := base64.StdEncoding.DecodeString(e.Leaf)
	if err != nil {
		t.Fatalf("entry %d: leaf: %v", e.Index, err)
	}
	if !bytes.Equal(lb, served) {
		t.Errorf("entry %d: recomputed leaf\n%x\nserved leaf\n%x", e.Index, lb, served)
	}
	if h := merkle.LeafHash(lb); h != e.LeafHash {
		t.Errorf("entry %d: recomputed leaf hash %s, served %s", e.Index, h, e.LeafHash)
	}
	if h := tlog.RecordHash(lb); merkle.Hash(h) != e.LeafHash {
		t.Errorf("entry %d: tlog.RecordHash %s, served leaf_hash %s", e.Index, h, e.LeafHash)
	}
	if ph := sha256.Sum256(payload); base64.StdEncoding.EncodeToString(ph[:]) != e.PayloadSHA256 {
		t.Errorf("entry %d: payload_sha256 %s, SHA-256 of the payload bytes is %x", e.Index, e.PayloadSHA256, ph)
	}
	return payload
}

// leafHashOf computes the leaf hash of an event posted with an explicit
// id and time, independently of the server.
func leafHashOf(t testing.TB, log, id string, key *string, ts time.Time, payload []byte) merkle.Hash {
	t.Helper()
	l := merkle.Leaf{Log: log, ID: id, Time: ts.UnixNano(), PayloadSHA256: sha256.Sum256(payload)}
	if key != nil {
		l.HasKey, l.Key = true, []byte(*key)
	}
	h, err := l.Hash()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// rfc6962Root is an independent, naive RFC 6962 Merkle tree hash over leaf
// hashes (MTH of section 2.1).
func rfc6962Root(leaves []merkle.Hash) merkle.Hash {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := rfc6962Root(leaves[:k]), rfc6962Root(leaves[k:])
	return sha256.Sum256(append(append([]byte{1}, l[:]...), r[:]...))
}

// jsonString encodes s as a JSON string without HTML escaping, the way the
// server does.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// wantBody requires the exact response body (the server ends every JSON
// body with a newline).
func wantBody(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	if string(got) != want {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// wantJSON requires got to be the same JSON value as want.
func wantJSON(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: response %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expected JSON %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// toTlog converts hashes for golang.org/x/mod/sumdb/tlog.
func toTlog(hs []merkle.Hash) []tlog.Hash {
	out := make([]tlog.Hash, len(hs))
	for i, h := range hs {
		out[i] = tlog.Hash(h)
	}
	return out
}

// ndjson joins lines into an NDJSON body.
func ndjson(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

// withT returns a copy of the env whose helpers report to t (for subtests).
func (e *testEnv) withT(t testing.TB) *testEnv {
	c := *e
	c.t = t
	return &c
}

// tlogTree keeps the hashes golang.org/x/mod/sumdb/tlog stores for a tree,
// computed from leaf hashes, so tlog can build reference proofs.
type tlogTree struct{ stored []tlog.Hash }

func (tr *tlogTree) reader() tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			if x < 0 || x >= int64(len(tr.stored)) {
				return nil, fmt.Errorf("tlog hash %d not stored", x)
			}
			out[i] = tr.stored[x]
		}
		return out, nil
	})
}

func newTlogTree(t testing.TB, leaves []merkle.Hash) *tlogTree {
	t.Helper()
	tr := &tlogTree{}
	for i, h := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), tlog.Hash(h), tr.reader())
		if err != nil {
			t.Fatal(err)
		}
		tr.stored = append(tr.stored, hs...)
	}
	return tr
}

// hashesJSON renders hashes as the server does: a JSON array of base64.
func hashesJSON[H ~[32]byte](hs []H) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = `"` + base64.StdEncoding.EncodeToString(h[:]) + `"`
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// gauge returns the value of the gauge name (with its auditd_ prefix) in
// the env's registry (envConfig.metrics), or -1 if it is not there.
func (e *testEnv) gauge(name string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// waitGauge waits until gauge name reads want, and fails the test if it
// does not within 10 seconds.
func (e *testEnv) waitGauge(name string, want float64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.gauge(name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s is %v after 10s, want %v", name, got, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

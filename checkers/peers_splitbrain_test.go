package checkers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
)

// newSplitNode is newPeerNode whose API names its instance
// (api.WithInstance), as serve's does.
func newSplitNode(t testing.TB, key testKey, in checkers.Instance, opts ...ledger.Option) *peerNode {
	t.Helper()
	st, err := ledger.Open(t.TempDir(), key.signer, key.verifier, append([]ledger.Option{quiet()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.WithInstance(api.New(st, key.vkey, api.Options{Logger: quietLogger()}), in))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &peerNode{store: st, url: srv.URL, key: key}
}

// splitCheck runs one pass of us's peer check, us being the instance self,
// and returns its findings and its comparison counts by "peer result".
func splitCheck(t *testing.T, us *peerNode, self checkers.Instance, peers ...checkers.Peer) (*collector, map[string]float64, error) {
	t.Helper()
	pc, err := checkers.NewPeerCheck(us.store, peers, checkers.WithInstance(self), checkers.WithPeerLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range pc.Collectors() {
		reg.MustRegister(c)
	}
	c := &collector{}
	err = pc.Run(context.Background(), c)
	got := gatherPeer(t, reg)
	counts := map[string]float64{}
	for k, v := range got {
		if p, ok := strings.CutPrefix(k, "peer_comparisons_total "); ok {
			counts[p] = v
		}
	}
	return c, counts, err
}

// appendOne appends one entry to n's log and returns the append's error.
func (n *peerNode) appendOne(t *testing.T, log string, i int) error {
	t.Helper()
	l, err := n.store.Log(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = l.Append(ctx, []ledger.Entry{honestEntry(i)})
	return err
}

// logJSON is GET /v1/logs/{log} of n.
func (n *peerNode) logJSON(t *testing.T, log string) (size uint64, readOnly string) {
	t.Helper()
	resp, err := http.Get(n.url + "/v1/logs/" + log)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Size     uint64 `json:"size"`
		ReadOnly string `json:"read_only"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Size, v.ReadOnly
}

// TestPeerSplitBrain: two instances signing one origin with one key (a
// split brain: both copies of the key, each its own data directory and
// identity) are each other's peer. Where their records diverge (at one
// size, or at sizes past a tile of 256 and past 1024 entries, either side
// the larger), each pass finds the fork, and the instance that found it
// puts its own log read-only: appends fail with ErrReadOnly, over the API
// too (503 read_only, GET /v1/logs/{log} says fork), and no checkpoint is
// signed after, however often appends are tried and passes run. A log the
// two agree on stays writable.
func TestPeerSplitBrain(t *testing.T) {
	key := newKey(t)
	ia, ib := checkers.Instance{ID: "a-instance", Run: "a-run"}, checkers.Instance{ID: "b-instance", Run: "b-run"}
	for _, tc := range []struct {
		name         string
		sizeA, sizeB int
		forkAt       int
	}{
		{"equal sizes", 700, 700, 699},
		{"equal sizes past 1024, fork in the last entry", 1025, 1025, 1024},
		{"B larger, past 1024", 1030, 1300, 257},
		{"A larger, past 1024, fork at the tile boundary", 1100, 257, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newSplitNode(t, key, ia), newSplitNode(t, key, ib)
			a.fill(t, peerLog, 0, tc.sizeA, honestEntry)
			b.fill(t, peerLog, 0, tc.sizeB, forkedEntry(tc.forkAt))
			a.fill(t, "other", 0, 10, honestEntry)
			b.fill(t, "other", 0, 20, honestEntry)
			for _, d := range []struct {
				name     string
				us, them *peerNode
				self     checkers.Instance
			}{{"A checks B", a, b, ia}, {"B checks A", b, a, ib}} {
				before := d.us.note(t, peerLog)
				c, counts, err := splitCheck(t, d.us, d.self, d.them.peer())
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				if len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork || c.findings[0].Log != peerLog {
					t.Fatalf("%s: findings %v, want one fork of %s", d.name, c.findings, peerLog)
				}
				if counts[d.them.url+" fork"] != 1 || counts[d.them.url+" agree"] != 1 {
					t.Fatalf("%s: comparisons %v, want a fork (%s) and an agreement (other)", d.name, counts, peerLog)
				}
				l, err := d.us.store.Log(peerLog)
				if err != nil {
					t.Fatal(err)
				}
				if ro := l.ReadOnly(); ro == nil || !strings.Contains(ro.Error(), "fork") || !strings.Contains(ro.Error(), "peer "+d.them.url) {
					t.Fatalf("%s: read-only %v, want one naming the fork and the peer", d.name, ro)
				}
				// Appends are refused, in process and over the API, and
				// no checkpoint is signed after: not after a second
				// attempt, not after another pass.
				for i := range 2 {
					if err := d.us.appendOne(t, peerLog, 5000+i); !errors.Is(err, ledger.ErrReadOnly) {
						t.Fatalf("%s: append %d after the fork: %v, want ErrReadOnly", d.name, i, err)
					}
				}
				resp, err := http.Post(d.us.url+"/v1/logs/"+peerLog+"/entries", "application/x-ndjson",
					strings.NewReader(`{"id":"after-fork","payload":{"n":1}}`+"\n"))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"read_only"`) {
					t.Fatalf("%s: POST after the fork: %s %s, want 503 read_only", d.name, resp.Status, body)
				}
				if c, _, err := splitCheck(t, d.us, d.self, d.them.peer()); err != nil || len(c.findings) != 1 {
					t.Fatalf("%s: second pass: findings %v, err %v", d.name, c.findings, err)
				}
				time.Sleep(50 * time.Millisecond) // a signer that would sign has had the time
				if after := d.us.note(t, peerLog); after != before {
					t.Fatalf("%s: checkpoint signed after the fork:\n%s\nthen\n%s", d.name, before, after)
				}
				if size, ro := d.us.logJSON(t, peerLog); size != l.Checkpoint().Size || !strings.Contains(ro, "fork") {
					t.Fatalf("%s: GET log: size %d, read_only %q", d.name, size, ro)
				}
				// The log both agree on takes appends still (the next
				// record: the two still agree).
				other, err := d.us.store.Log("other")
				if err != nil {
					t.Fatal(err)
				}
				if err := d.us.appendOne(t, "other", int(other.Size())); err != nil {
					t.Fatalf("%s: append to the agreeing log: %v", d.name, err)
				}
			}
		})
	}
}

// TestPeerSplitBrainAgree: two instances signing with one key that agree
// (one log a prefix of the other, then equal) find nothing and stay
// writable; and a fork with a peer signing with its own key is a finding
// but no evidence against this log's key: the log stays writable.
func TestPeerSplitBrainAgree(t *testing.T) {
	key := newKey(t)
	ia, ib := checkers.Instance{ID: "a-instance", Run: "a-run"}, checkers.Instance{ID: "b-instance", Run: "b-run"}
	a, b := newSplitNode(t, key, ia), newSplitNode(t, key, ib)
	a.fill(t, peerLog, 0, 1100, honestEntry)
	b.fill(t, peerLog, 0, 257, honestEntry)
	check := func(next int) {
		t.Helper()
		for _, d := range []struct {
			us, them *peerNode
			self     checkers.Instance
		}{{a, b, ia}, {b, a, ib}} {
			c, counts, err := splitCheck(t, d.us, d.self, d.them.peer())
			if err != nil || len(c.findings) != 0 || counts[d.them.url+" agree"] != 2 { // pay.0 and scratch
				t.Fatalf("findings %v, comparisons %v, err %v", c.findings, counts, err)
			}
			if err := d.us.appendOne(t, "scratch", next); err != nil {
				t.Fatalf("append: %v", err)
			}
			if l, _ := d.us.store.Log(peerLog); l.ReadOnly() != nil {
				t.Fatalf("read-only: %v", l.ReadOnly())
			}
		}
	}
	a.fill(t, "scratch", 0, 1, honestEntry)
	b.fill(t, "scratch", 0, 1, honestEntry)
	check(1)
	b.fill(t, peerLog, 257, 1100, honestEntry)
	check(2)

	other := newSplitNode(t, newKey(t), checkers.Instance{ID: "c-instance", Run: "c-run"})
	other.fill(t, peerLog, 0, 1100, forkedEntry(300))
	c, _, err := splitCheck(t, a, ia, other.peer())
	if err != nil || len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork {
		t.Fatalf("another key's fork: findings %v, err %v", c.findings, err)
	}
	if l, _ := a.store.Log(peerLog); l.ReadOnly() != nil {
		t.Fatalf("a fork with another key's checkpoint made the log read-only: %v", l.ReadOnly())
	}
}

// TestPeerSplitBrainSelf: a peer that answers with this instance's
// identity and run is this instance (its own URL in a peer list shared by
// every instance): not compared, not a finding nor an error, counted as
// self; the other peers are compared all the same. One that answers with
// this data directory's identity from another run serves a copy of it: it
// is compared, and its fork found.
func TestPeerSplitBrainSelf(t *testing.T) {
	key := newKey(t)
	ia, ib := checkers.Instance{ID: "a-instance", Run: "a-run"}, checkers.Instance{ID: "b-instance", Run: "b-run"}
	a, b := newSplitNode(t, key, ia), newSplitNode(t, key, ib)
	a.fill(t, peerLog, 0, 300, honestEntry)
	b.fill(t, peerLog, 0, 400, honestEntry)
	c, counts, err := splitCheck(t, a, ia, a.peer(), b.peer())
	if err != nil || len(c.findings) != 0 {
		t.Fatalf("findings %v, err %v", c.findings, err)
	}
	for _, w := range []struct {
		key string
		n   float64
	}{{a.url + " self", 1}, {a.url + " agree", 0}, {b.url + " agree", 1}, {b.url + " self", 0}} {
		if counts[w.key] != w.n {
			t.Errorf("comparisons %s: %v, want %v (all: %v)", w.key, counts[w.key], w.n, counts)
		}
	}

	copied := newSplitNode(t, key, checkers.Instance{ID: ia.ID, Run: "another-run"})
	copied.fill(t, peerLog, 0, 300, forkedEntry(299))
	c, counts, err = splitCheck(t, a, ia, copied.peer())
	if err != nil || len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork || counts[copied.url+" fork"] != 1 {
		t.Fatalf("copy of the data directory: findings %v, comparisons %v, err %v", c.findings, counts, err)
	}
	if l, _ := a.store.Log(peerLog); l.ReadOnly() == nil {
		t.Fatal("a fork with a copy of this data directory left the log writable")
	}
}

// TestPeerSplitBrainForkedOnce: the check gives the same evidence (peer,
// log, both checkpoints) to ledger.Log.Forked once, not on every pass that
// finds the fork again (each pass still reports the finding); new evidence
// (the peer's checkpoint grew) is given again.
func TestPeerSplitBrainForkedOnce(t *testing.T) {
	key := newKey(t)
	ia, ib := checkers.Instance{ID: "a-instance", Run: "a-run"}, checkers.Instance{ID: "b-instance", Run: "b-run"}
	var mu sync.Mutex
	var forks []string
	a := newSplitNode(t, key, ia, ledger.WithIntegrityHandler(func(e *ledger.IntegrityError) {
		if e.Kind == ledger.IntegrityFork {
			mu.Lock()
			forks = append(forks, e.Detail)
			mu.Unlock()
		}
	}))
	b := newSplitNode(t, key, ib)
	a.fill(t, peerLog, 0, 300, honestEntry)
	b.fill(t, peerLog, 0, 300, forkedEntry(10))
	pc, err := checkers.NewPeerCheck(a.store, []checkers.Peer{b.peer()}, checkers.WithInstance(ia), checkers.WithPeerLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		c := &collector{}
		if err := pc.Run(context.Background(), c); err != nil || len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork {
			t.Fatalf("findings %v, err %v", c.findings, err)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(forks)
	}
	for range 3 {
		pass()
	}
	if n := count(); n != 1 {
		t.Fatalf("%d fork failures recorded in 3 passes, want 1: %q", n, forks)
	}
	if !strings.Contains(forks[0], "peer "+b.url) || !strings.Contains(forks[0], "size 300") {
		t.Fatalf("evidence %q does not name the peer and the sizes", forks[0])
	}
	b.fill(t, peerLog, 300, 400, forkedEntry(10))
	pass()
	pass()
	if n := count(); n != 2 {
		t.Fatalf("%d fork failures recorded after the peer grew, want 2: %q", n, forks)
	}
}

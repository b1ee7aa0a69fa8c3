package checkers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

const peerLog = "pay.0"

// peerNode is a real ledger served by a real API server on loopback.
type peerNode struct {
	store *ledger.Store
	url   string
	key   testKey
}

// newPeerNode opens a ledger signing with key and serves it.
func newPeerNode(t testing.TB, key testKey) *peerNode {
	t.Helper()
	st, err := ledger.Open(t.TempDir(), key.signer, key.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(st, key.vkey, api.Options{Logger: quietLogger()}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &peerNode{store: st, url: srv.URL, key: key}
}

// fill appends the entries [from, to) of log made by mk, in batches of
// 300, each followed by a checkpoint.
func (n *peerNode) fill(t testing.TB, log string, from, to int, mk func(int) ledger.Entry) {
	t.Helper()
	l, err := n.store.LogForAppend(log)
	if err != nil {
		l, err = n.store.CreateLog(log)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for next := from; next < to; {
		k := min(300, to-next)
		es := make([]ledger.Entry, k)
		for j := range es {
			es[j] = mk(next + j)
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
		next += k
		if _, err := l.WaitCheckpoint(ctx, uint64(next)); err != nil {
			t.Fatal(err)
		}
	}
}

func (n *peerNode) peer() checkers.Peer {
	return checkers.Peer{URL: n.url, Verifier: n.key.verifier}
}

func (n *peerNode) note(t *testing.T, log string) string {
	t.Helper()
	l, err := n.store.Log(log)
	if err != nil {
		t.Fatal(err)
	}
	return string(l.Checkpoint().Note)
}

// honestEntry is record i of a partition: its time is the record's, as
// Kafka's, so two consumers build the same leaf.
func honestEntry(i int) ledger.Entry {
	e := testEntry(i, 40)
	e.Time = time.Unix(1_700_000_000, 0).Add(time.Duration(i) * time.Millisecond)
	return e
}

// forkedEntry is honestEntry but from index at on a different payload.
func forkedEntry(at int) func(int) ledger.Entry {
	return func(i int) ledger.Entry {
		e := honestEntry(i)
		if i >= at {
			e.Payload = append(e.Payload, "-forked"...)
		}
		return e
	}
}

// crossCheck runs one pass of n's peer check against peers.
func crossCheck(t *testing.T, n *peerNode, peers ...checkers.Peer) (*collector, error) {
	t.Helper()
	pc, err := checkers.NewPeerCheck(n.store, peers)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	return c, pc.Run(context.Background(), c)
}

// TestPeerFork feeds two real ledgers, signing with the same key and so
// the same origin, different records under one log name: every signature
// verifies, the trees differ. Each is the other's peer; one pass finds the
// fork with both signed notes as evidence, whichever is larger (our proof,
// the peer's proof) and at equal sizes, past tile (256) and batch
// boundaries.
func TestPeerFork(t *testing.T) {
	key := newKey(t)
	for _, tc := range []struct {
		name         string
		sizeA, sizeB int
		forkAt       int
		wantA, wantB int // findings of A's and B's pass
	}{
		{"equal sizes", 700, 700, 699, 1, 1},
		{"B larger", 600, 1100, 300, 1, 1},
		{"A larger, fork in the last entry of B", 1030, 257, 256, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPeerNode(t, key), newPeerNode(t, key)
			a.fill(t, peerLog, 0, tc.sizeA, honestEntry)
			b.fill(t, peerLog, 0, tc.sizeB, forkedEntry(tc.forkAt))
			// An honest log both have is compared too, and agrees.
			a.fill(t, "other", 0, 10, honestEntry)
			b.fill(t, "other", 0, 20, honestEntry)
			for _, d := range []struct {
				name     string
				us, them *peerNode
				want     int
			}{{"A checks B", a, b, tc.wantA}, {"B checks A", b, a, tc.wantB}} {
				c, err := crossCheck(t, d.us, d.them.peer())
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				if len(c.findings) != d.want {
					t.Fatalf("%s: findings %v, want %d", d.name, c.findings, d.want)
				}
				f := c.findings[0]
				if f.Kind != ledger.IntegrityFork || f.Log != peerLog {
					t.Fatalf("%s: finding %v, want a fork of %s", d.name, f, peerLog)
				}
				wantEv := []string{d.us.note(t, peerLog), d.them.note(t, peerLog)}
				if len(f.Evidence) != 2 || f.Evidence[0] != wantEv[0] || f.Evidence[1] != wantEv[1] {
					t.Fatalf("%s: evidence %q, want both notes %q", d.name, f.Evidence, wantEv)
				}
				// Both notes verify with the one key: a split view, not a
				// bad signature.
				for _, ev := range f.Evidence {
					if _, err := merkle.OpenCheckpoint([]byte(ev), key.verifier, key.verifier.Name()+"/"+peerLog); err != nil {
						t.Fatalf("%s: evidence does not verify: %v", d.name, err)
					}
				}
			}
		})
	}
}

// TestPeerHonest: two ledgers fed the same records, at different sizes and
// then at equal sizes, agree both ways: no finding, no error.
func TestPeerHonest(t *testing.T) {
	key := newKey(t)
	a, b := newPeerNode(t, newKey(t)), newPeerNode(t, key)
	a.fill(t, peerLog, 0, 1100, honestEntry)
	b.fill(t, peerLog, 0, 257, honestEntry)
	check := func() {
		t.Helper()
		for _, d := range []struct{ us, them *peerNode }{{a, b}, {b, a}} {
			c, err := crossCheck(t, d.us, d.them.peer())
			if err != nil {
				t.Fatal(err)
			}
			if len(c.findings) != 0 {
				t.Fatalf("findings %v", c.findings)
			}
		}
	}
	check()
	b.fill(t, peerLog, 257, 1100, honestEntry)
	check()
	// A log only one side has is not compared; nor is one the peer has not
	// signed yet (it exists, its first append is not signed).
	a.fill(t, "only-a", 0, 3, honestEntry)
	check()
	if _, err := b.store.CreateLog("unsigned"); err != nil {
		t.Fatal(err)
	}
	a.fill(t, "unsigned", 0, 3, honestEntry)
	check()
}

// peerStub serves one log's checkpoint as given and, optionally, a proof.
func peerStub(t *testing.T, checkpoint []byte, proof string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/logs":
			fmt.Fprintf(w, `[{"name":%q}]`, peerLog)
		case "/v1/logs/" + peerLog + "/checkpoint":
			w.Write(checkpoint)
		case "/v1/logs/" + peerLog + "/proof/consistency":
			if proof == "" {
				http.Error(w, `{"error":"no"}`, http.StatusInternalServerError)
				return
			}
			w.Write([]byte(proof))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPeerBadCheckpoint: a peer whose checkpoint is signed by another key
// of the same name, has its body altered under a valid signature, or is
// validly signed for another origin is a peer_checkpoint_bad finding, never
// a fork; a peer that is down, answers garbage, or serves no or an
// undecodable proof is an error, never a finding.
func TestPeerBadCheckpoint(t *testing.T) {
	key := newKey(t)
	us := newPeerNode(t, newKey(t))
	us.fill(t, peerLog, 0, 20, honestEntry)
	theirs := newPeerNode(t, key)
	theirs.fill(t, peerLog, 0, 30, honestEntry)
	good := []byte(theirs.note(t, peerLog))
	sign := func(s note.Signer, text string) []byte {
		b, err := note.Sign(&note.Note{Text: text}, s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Another key under the same name.
	skey, _, err := note.GenerateKey(rand.Reader, key.verifier.Name())
	if err != nil {
		t.Fatal(err)
	}
	impostor, _ := note.NewSigner(skey)
	cp, err := merkle.OpenCheckpoint(good, key.verifier, "")
	if err != nil {
		t.Fatal(err)
	}
	body := string(cp.Text())
	altered := strings.Replace(string(good), "\n30\n", "\n31\n", 1)
	if altered == string(good) {
		t.Fatal("size line not found")
	}
	otherOrigin := merkle.Checkpoint{Origin: key.verifier.Name() + "/other", Size: cp.Size, Root: cp.Root}
	otherNote, err := otherOrigin.Sign(key.signer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		note []byte
	}{
		{"another key, same name", sign(impostor, body)},
		{"altered body", []byte(altered)},
		{"another origin", otherNote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := crossCheck(t, us, checkers.Peer{URL: peerStub(t, tc.note, ""), Verifier: key.verifier})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityPeerCheckpointBad {
				t.Fatalf("findings %v, want one %s", c.findings, ledger.IntegrityPeerCheckpointBad)
			}
			if ev := c.findings[0].Evidence; len(ev) != 1 || ev[0] != string(tc.note) {
				t.Fatalf("evidence %q", ev)
			}
		})
	}

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, tc := range []struct {
		name string
		url  string
	}{
		{"down", down.URL},
		{"garbage", peerStub(t, []byte("<html>hello</html>"), "")},
		{"signed non-checkpoint", peerStub(t, sign(key.signer, "hello\n"), "")},
		// The peer's checkpoint (30) is larger than ours (20): its proof
		// is asked for.
		{"proof refused", peerStub(t, good, "")},
		{"proof garbage", peerStub(t, good, `{"hashes":"nope"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := crossCheck(t, us, checkers.Peer{URL: tc.url, Verifier: key.verifier})
			if err == nil {
				t.Fatal("no error")
			}
			if len(c.findings) != 0 {
				t.Fatalf("findings %v, want none", c.findings)
			}
		})
	}
	t.Run("a down peer does not hide another's fork", func(t *testing.T) {
		forked := newPeerNode(t, key)
		forked.fill(t, peerLog, 0, 20, forkedEntry(5))
		c, err := crossCheck(t, us, checkers.Peer{URL: down.URL, Verifier: newKey(t).verifier}, forked.peer())
		if err == nil || !strings.Contains(err.Error(), down.URL) {
			t.Fatalf("err %v, want one naming the down peer", err)
		}
		if len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork {
			t.Fatalf("findings %v, want the fork", c.findings)
		}
	})
	t.Run("a proof that decodes and does not verify is a fork", func(t *testing.T) {
		c, err := crossCheck(t, us, checkers.Peer{URL: peerStub(t, good, `{"hashes":[]}`), Verifier: key.verifier})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork {
			t.Fatalf("findings %v, want a fork", c.findings)
		}
	})
}

// TestPeerOrigins: a C2SP server with its own key and origin for the log
// agrees when configured with that origin, is peer_checkpoint_bad
// without it; its checkpoint of the empty tree must carry the empty root.
func TestPeerOrigins(t *testing.T) {
	us := newPeerNode(t, newKey(t))
	us.fill(t, peerLog, 0, 20, honestEntry)
	l, err := us.store.Log(peerLog)
	if err != nil {
		t.Fatal(err)
	}
	other := newKey(t)
	signed := func(size uint64, root merkle.Hash) []byte {
		b, err := merkle.Checkpoint{Origin: "example.com/pay/0", Size: size, Root: root}.Sign(other.signer)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	root := l.Checkpoint().Root
	mapped := checkers.Peer{URL: peerStub(t, signed(20, root), ""), Verifier: other.verifier,
		Origins: map[string]string{peerLog: "example.com/pay/0"}}
	if c, err := crossCheck(t, us, mapped); err != nil || len(c.findings) != 0 {
		t.Fatalf("mapped origin: findings %v, err %v", c.findings, err)
	}
	unmapped := mapped
	unmapped.Origins = nil
	if c, err := crossCheck(t, us, unmapped); err != nil || len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityPeerCheckpointBad {
		t.Fatalf("unmapped origin: findings %v, err %v", c.findings, err)
	}
	prefixed := unmapped
	prefixed.OriginPrefix = "example.com/"
	if c, err := crossCheck(t, us, prefixed); err != nil || len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityPeerCheckpointBad {
		t.Fatalf("wrong prefix: findings %v, err %v", c.findings, err)
	}
	for _, tc := range []struct {
		name string
		size uint64
		root merkle.Hash
		fork bool
	}{
		{"empty tree", 0, merkle.EmptyRoot(), false},
		{"empty tree, another root", 0, root, true},
		{"our size, our root flipped", 20, merkle.Hash{1}, true},
	} {
		p := mapped
		p.URL = peerStub(t, signed(tc.size, tc.root), "")
		c, err := crossCheck(t, us, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(c.findings) == 1 && c.findings[0].Kind == ledger.IntegrityFork; got != tc.fork || (!tc.fork && len(c.findings) != 0) {
			t.Fatalf("%s: findings %v, want fork %v", tc.name, c.findings, tc.fork)
		}
	}
}

// TestPeerConfig: a peer listed twice (by URL) and peers without URL or
// key are refused; peers sharing a key and origins with each other or with
// this instance (a split brain, several instances signing with one key)
// are allowed: at check time, identities tell them apart.
func TestPeerConfig(t *testing.T) {
	self, other := newKey(t), newKey(t)
	p := func(u string, k testKey) checkers.Peer { return checkers.Peer{URL: u, Verifier: k.verifier} }
	for _, tc := range []struct {
		name  string
		peers []checkers.Peer
		ok    bool
	}{
		{"two peers", []checkers.Peer{p("http://a:1", other), p("http://b:1", newKey(t))}, true},
		{"same key, other origin prefix", []checkers.Peer{{URL: "http://a:1", Verifier: self.verifier, OriginPrefix: "mirror/"}}, true},
		{"same URL twice", []checkers.Peer{p("http://a:1", other), p("http://a:1/", newKey(t))}, false},
		{"same key and origins twice", []checkers.Peer{p("http://a:1", other), p("http://b:1", other)}, true},
		{"this instance's key and origins", []checkers.Peer{p("http://a:1", self)}, true},
		{"this instance's key at two URLs", []checkers.Peer{p("http://a:1", self), p("http://b:1", self)}, true},
		{"no URL", []checkers.Peer{p("", other)}, false},
		{"not http", []checkers.Peer{p("ftp://a", other)}, false},
		{"no key", []checkers.Peer{{URL: "http://a:1"}}, false},
	} {
		err := checkers.ValidatePeers(tc.peers)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// BenchmarkPeerCheck is one pass over 100 logs of 300 entries each, both
// ledgers on loopback, the peer's checkpoint larger (its proof fetched).
func BenchmarkPeerCheck(b *testing.B) {
	key := newKey(b)
	mk := func() (*ledger.Store, string) {
		st, err := ledger.Open(b.TempDir(), key.signer, key.verifier, quiet())
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(api.New(st, key.vkey, api.Options{Logger: quietLogger()}))
		b.Cleanup(func() { srv.Close(); st.Close() })
		return st, srv.URL
	}
	us, _ := mk()
	them, url := mk()
	ctx := context.Background()
	for i := range 100 {
		name := fmt.Sprintf("pay.%d", i)
		for _, s := range []struct {
			st *ledger.Store
			n  int
		}{{us, 200}, {them, 300}} {
			l, err := s.st.CreateLog(name)
			if err != nil {
				b.Fatal(err)
			}
			es := make([]ledger.Entry, s.n)
			for j := range es {
				es[j] = honestEntry(j)
			}
			if _, err := l.Append(ctx, es); err != nil {
				b.Fatal(err)
			}
			if _, err := l.WaitCheckpoint(ctx, uint64(s.n)); err != nil {
				b.Fatal(err)
			}
		}
	}
	pc, err := checkers.NewPeerCheck(us, []checkers.Peer{{URL: url, Verifier: key.verifier}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		c := &collector{}
		if err := pc.Run(ctx, c); err != nil || len(c.findings) != 0 {
			b.Fatalf("%v %v", err, c.findings)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/log")
}

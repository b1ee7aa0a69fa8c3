package checkers_test

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/auditd/auditd/checkers"
)

// switchPeer is a peer's address that serves, through a reverse proxy,
// whichever real server it points at: a peer restored from a backup, or a
// replica behind a load balancer.
type switchPeer struct {
	url    string
	target atomic.Pointer[url.URL]
}

func newSwitchPeer(t *testing.T, to string) *switchPeer {
	t.Helper()
	sp := &switchPeer{}
	sp.point(t, to)
	srv := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(sp.target.Load())
	}})
	t.Cleanup(srv.Close)
	sp.url = srv.URL
	return sp
}

func (sp *switchPeer) point(t *testing.T, to string) {
	u, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	sp.target.Store(u)
}

// TestPeerRollback: a peer that served a checkpoint of 800 entries and
// then serves an older one of 500 (consistent with ours, so no fork) is a
// peer_rollback finding with both notes, the earlier first, on every pass
// until it catches up, also after a restart of the check (the largest
// checkpoint seen is persisted); a peer that served 800 entries and then
// serves 900 that its 800 are not a prefix of (forked at 700, past our
// 600: our tree alone cannot see it) is one too. Neither is a fork.
func TestPeerRollback(t *testing.T) {
	peerKey := newKey(t)
	run := func(t *testing.T, us *peerNode, sp *switchPeer) []checkers.Finding {
		t.Helper()
		pc, err := checkers.NewPeerCheck(us.store, []checkers.Peer{{URL: sp.url, Verifier: peerKey.verifier}})
		if err != nil {
			t.Fatal(err)
		}
		c := &collector{}
		if err := pc.Run(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		for _, f := range c.findings {
			if f.Kind != checkers.IntegrityPeerRollback {
				t.Fatalf("finding %v", f)
			}
		}
		return c.findings
	}

	t.Run("smaller", func(t *testing.T) {
		us, old, cur := newPeerNode(t, newKey(t)), newPeerNode(t, peerKey), newPeerNode(t, peerKey)
		us.fill(t, peerLog, 0, 1000, honestEntry)
		old.fill(t, peerLog, 0, 500, honestEntry)
		cur.fill(t, peerLog, 0, 800, honestEntry)
		sp := newSwitchPeer(t, cur.url)
		if fs := run(t, us, sp); len(fs) != 0 {
			t.Fatalf("first pass: %v", fs)
		}
		sp.point(t, old.url)
		for pass := range 2 { // each a new PeerCheck: a restarted daemon
			fs := run(t, us, sp)
			if len(fs) != 1 || *fs[0].Checkpoint != 500 || !strings.Contains(fs[0].Detail, "smaller") ||
				len(fs[0].Evidence) != 2 || fs[0].Evidence[0] != cur.note(t, peerLog) || fs[0].Evidence[1] != old.note(t, peerLog) {
				t.Fatalf("pass %d after the rollback: %+v", pass, fs)
			}
		}
		sp.point(t, cur.url)
		if fs := run(t, us, sp); len(fs) != 0 {
			t.Fatalf("caught up: %v", fs)
		}
	})

	t.Run("inconsistent with itself", func(t *testing.T) {
		us, honest, forked := newPeerNode(t, newKey(t)), newPeerNode(t, peerKey), newPeerNode(t, peerKey)
		us.fill(t, peerLog, 0, 600, honestEntry)
		honest.fill(t, peerLog, 0, 800, honestEntry)
		forked.fill(t, peerLog, 0, 900, forkedEntry(700))
		sp := newSwitchPeer(t, honest.url)
		if fs := run(t, us, sp); len(fs) != 0 {
			t.Fatalf("first pass: %v", fs)
		}
		sp.point(t, forked.url)
		fs := run(t, us, sp)
		if len(fs) != 1 || *fs[0].Checkpoint != 900 || !strings.Contains(fs[0].Detail, "does not extend") ||
			len(fs[0].Evidence) != 2 || fs[0].Evidence[0] != honest.note(t, peerLog) || fs[0].Evidence[1] != forked.note(t, peerLog) {
			t.Fatalf("after the split: %+v", fs)
		}
	})
}

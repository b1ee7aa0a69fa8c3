package checkers_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/checkers"
)

// TestPeerMetrics: each comparison is counted by result (agree, fork,
// unsigned, error), and an agreeing one sets the peer's agreed size to
// the smaller checkpoint's.
func TestPeerMetrics(t *testing.T) {
	a, honest, forked := newPeerNode(t, newKey(t)), newPeerNode(t, newKey(t)), newPeerNode(t, newKey(t))
	a.fill(t, peerLog, 0, 700, honestEntry)
	honest.fill(t, peerLog, 0, 600, honestEntry)
	forked.fill(t, peerLog, 0, 700, forkedEntry(650))
	down := checkers.Peer{URL: "http://127.0.0.1:1", Verifier: newKey(t).verifier}
	pc, err := checkers.NewPeerCheck(a.store, []checkers.Peer{honest.peer(), forked.peer(), down})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range pc.Collectors() {
		reg.MustRegister(c)
	}
	c := &collector{}
	if err := pc.Run(context.Background(), c); err == nil {
		t.Fatal("a peer that is down is no error")
	}
	if len(c.findings) != 1 {
		t.Fatalf("findings %v", c.findings)
	}
	got := gatherPeer(t, reg)
	for _, w := range []struct {
		peer, result string
		n            float64
	}{
		{honest.url, "agree", 1}, {honest.url, "fork", 0}, {forked.url, "fork", 1}, {forked.url, "agree", 0},
	} {
		if v := got["peer_comparisons_total "+w.peer+" "+w.result]; v != w.n {
			t.Errorf("%s %s: %v, want %v", w.peer, w.result, v, w.n)
		}
	}
	// The peer that is down never lists its logs: no comparison.
	if v := got["peer_agreed_size "+honest.url]; v != 600 {
		t.Errorf("agreed size %v, want 600", v)
	}
	if n := got["peer_comparisons_total series"]; n != 21 {
		t.Errorf("%v series, want 7 results for each of 3 peers", n)
	}
}

// gatherPeer returns reg's samples by "name label values...", and the
// number of series of each name under "name series".
func gatherPeer(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += " " + l.GetValue()
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[k] = v
			out[mf.GetName()+" series"]++
		}
	}
	return out
}

package checkers_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/checkers"
)

const urlPassword = "s3cr3t-PASS"

// withPassword puts user:urlPassword into base's userinfo.
func withPassword(base string) string {
	return strings.Replace(base, "http://", "http://auditor:"+urlPassword+"@", 1)
}

// TestPeerHidesURLPassword (issue 28): a peer URL's password is shown
// nowhere: not in the pass's error (GET /v1/checks' error and last_error),
// a finding's detail, the metric labels of peer_comparisons_total and
// peer_agreed_size, nor the check's log; for peers that are down, answer
// 500, answer garbage, sign with another key, fork, agree, and are this
// instance.
func TestPeerHidesURLPassword(t *testing.T) {
	self := checkers.Instance{ID: "us", Run: "run-1"}
	key := newKey(t)
	us := newSplitNode(t, key, self)
	us.fill(t, peerLog, 0, 20, honestEntry)
	honest, forked, badSig := newPeerNode(t, newKey(t)), newPeerNode(t, newKey(t)), newPeerNode(t, newKey(t))
	honest.fill(t, peerLog, 0, 20, honestEntry)
	forked.fill(t, peerLog, 0, 20, forkedEntry(10))
	badSig.fill(t, peerLog, 0, 20, honestEntry)
	serve := func(code int, body string) string {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(ts.Close)
		return ts.URL
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	peer := func(u string, n *peerNode) checkers.Peer {
		p := checkers.Peer{URL: withPassword(u), Verifier: newKey(t).verifier, Logs: []string{peerLog}}
		if n != nil {
			p.Verifier = n.key.verifier
		}
		return p
	}
	peers := []checkers.Peer{
		peer(honest.url, honest),
		peer(forked.url, forked),
		peer(badSig.url, nil),
		peer(down.URL, nil),
		peer(serve(500, "boom"), nil),
		peer(serve(200, "not a checkpoint"), nil),
		peer(us.url+"/", us), // this instance itself
	}
	var logs bytes.Buffer
	pc, err := checkers.NewPeerCheck(us.store, peers, checkers.WithInstance(self),
		checkers.WithPeerLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	for _, c := range pc.Collectors() {
		reg.MustRegister(c)
	}
	c := &collector{}
	runErr := pc.Run(context.Background(), c)
	if runErr == nil {
		t.Fatal("peers that are down or answer garbage are no error")
	}
	if len(c.findings) != 2 {
		t.Fatalf("findings %v, want the fork and the bad signature", c.findings)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var labels strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&labels, "%s=%s ", l.GetName(), l.GetValue())
			}
		}
	}
	shown := map[string]string{"error": runErr.Error(), "log": logs.String(), "metric labels": labels.String()}
	for i, f := range c.findings {
		shown[fmt.Sprintf("finding %d", i)] = fmt.Sprint(f.Detail, f.Evidence)
	}
	for what, s := range shown {
		if strings.Contains(s, urlPassword) {
			t.Errorf("the %s shows the password:\n%s", what, s)
		}
	}
	if !strings.Contains(labels.String(), "auditor:xxxxx@") {
		t.Errorf("metric labels do not name the peers by their redacted URL: %s", labels.String())
	}
	if !strings.Contains(logs.String(), "peer is this instance") {
		t.Errorf("log %q: no warning about the peer that is this instance", logs.String())
	}
}

// TestValidatePeersHidesURLPassword (issue 28): a refused peer list names
// the peer's URL without its password, parsable or not.
func TestValidatePeersHidesURLPassword(t *testing.T) {
	v := newKey(t).verifier
	for name, peers := range map[string][]checkers.Peer{
		"not http":     {{URL: "ftp://auditor:" + urlPassword + "@host", Verifier: v}},
		"bad port":     {{URL: "http://auditor:" + urlPassword + "@host:port", Verifier: v}},
		"listed twice": {{URL: "http://auditor:" + urlPassword + "@host", Verifier: v}, {URL: "http://auditor:" + urlPassword + "@host/", Verifier: v}},
	} {
		err := checkers.ValidatePeers(peers)
		if err == nil || strings.Contains(err.Error(), urlPassword) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

package checkers_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/internal/testca"
	"github.com/auditd/auditd/ledger"
)

// TestPeerTLS: a forked peer served over https that requires a client
// certificate is compared (its log list, checkpoint and consistency proof
// all fetched over TLS), and the fork found, when the Peer carries its CA
// and a client certificate; without them it is an error of the pass,
// never a finding.
func TestPeerTLS(t *testing.T) {
	key := newKey(t)
	a := newPeerNode(t, key)
	st, err := ledger.Open(t.TempDir(), key.signer, key.verifier, quiet())
	if err != nil {
		t.Fatal(err)
	}
	serverCA, clientCA := testca.New(t, "server CA"), testca.New(t, "client CA")
	srv := httptest.NewUnstartedServer(api.New(st, key.vkey, api.Options{Logger: quietLogger()}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCA.Server(t).TLS(t)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool()}
	srv.StartTLS()
	t.Cleanup(func() { srv.Close(); st.Close() })
	b := &peerNode{store: st, url: srv.URL, key: key}
	a.fill(t, peerLog, 0, 300, honestEntry)
	b.fill(t, peerLog, 0, 600, forkedEntry(100)) // larger: its consistency proof is fetched

	peer := b.peer()
	peer.TLS = &tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{clientCA.Client(t, "a").TLS(t)}}
	pc, err := checkers.NewPeerCheck(a.store, []checkers.Peer{peer})
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	if err := pc.Run(t.Context(), c); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if len(c.findings) != 1 || c.findings[0].Kind != ledger.IntegrityFork {
		t.Fatalf("findings %v: want the fork", c.findings)
	}

	c, err = crossCheck(t, a, b.peer()) // no TLS configuration
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || len(c.findings) != 0 {
		t.Errorf("without the CA: err %v, findings %v; want an x509.UnknownAuthorityError and no finding", err, c.findings)
	}
	noCert := b.peer()
	noCert.TLS = &tls.Config{RootCAs: serverCA.Pool()}
	if c, err := crossCheck(t, a, noCert); err == nil || len(c.findings) != 0 {
		t.Errorf("without a client certificate: err %v, findings %v; want an error and no finding", err, c.findings)
	}
}

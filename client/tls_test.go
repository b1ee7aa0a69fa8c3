package client_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/internal/testca"
	"github.com/auditd/auditd/ledger"
)

// TestTLS: over https, a client given the server's CA (WithTLSConfig)
// proves an entry; one without it is refused by the certificate check.
func TestTLS(t *testing.T) {
	t.Parallel()
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(keyName),
		ledgertest.WithLedger(ledger.WithCheckpointInterval(0)))
	srv := httptest.NewUnstartedServer(api.New(store, key.VKey, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	ca := testca.New(t, "client test CA")
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := &testServer{store: store, key: key, url: srv.URL}
	s.fill(t, "orders", 5)

	c := client.New(srv.URL, key.Verifier, client.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}))
	cp, _, err := c.Checkpoint(ctx(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.EntryByID(ctx(t), "orders", testEntry(3).ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ProveEntry(ctx(t), "orders", e, cp); err != nil {
		t.Errorf("ProveEntry over TLS: %v", err)
	}

	_, _, err = client.New(srv.URL, key.Verifier).Checkpoint(ctx(t), "orders")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("client without the CA: %v, want x509.UnknownAuthorityError", err)
	}
}

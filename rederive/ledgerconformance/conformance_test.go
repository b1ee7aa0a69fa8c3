package ledgerconformance_test

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/ledgerconformance"
)

func TestLocalLedger(t *testing.T) {
	ledgerconformance.Run(t, func(t *testing.T, f ledgerconformance.Fixture) rederive.Ledger {
		return rederive.LocalLedger{Store: f.Store}
	})
}

// TestRemoteLedger runs the suite against a remote ledger reading a real
// auditd API server on loopback, with the default page size and one that
// does not divide the log.
func TestRemoteLedger(t *testing.T) {
	for _, page := range []uint64{0, 333} {
		t.Run("page="+map[uint64]string{0: "default", 333: "333"}[page], func(t *testing.T) {
			ledgerconformance.Run(t, func(t *testing.T, f ledgerconformance.Fixture) rederive.Ledger {
				srv := httptest.NewServer(api.New(f.Store, f.VerifierKey, api.Options{Logger: slog.New(slog.DiscardHandler)}))
				t.Cleanup(srv.Close)
				return &rederive.RemoteLedger{Client: client.New(srv.URL, f.Verifier), PageSize: page}
			})
		})
	}
}

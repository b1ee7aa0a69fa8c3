package alert_test

import (
	"testing"

	"github.com/auditd/auditd/alert"
	"github.com/auditd/auditd/alert/kvtest"
	"github.com/auditd/auditd/internal/ledgertest"
)

// TestKVConformance runs the one KV suite against the in-memory fake the
// other tests use and against the ledger's Pebble bucket.
func TestKVConformance(t *testing.T) {
	t.Parallel()
	t.Run("memKV", func(t *testing.T) {
		kvtest.Run(t, func(t *testing.T) alert.KV { return newMemKV() })
	})
	t.Run("ledger.Bucket", func(t *testing.T) {
		kvtest.Run(t, func(t *testing.T) alert.KV {
			b, err := ledgertest.Open(t).Bucket("alerts")
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	})
}

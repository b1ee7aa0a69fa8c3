package alert

import "testing"

// TestConstructors: each kind of alert auditd raises has its id, kind,
// subject and severity from one constructor, and is valid as built.
func TestConstructors(t *testing.T) {
	for _, tc := range []struct {
		a                 Alert
		id, subject       string
		kind              Kind
		severity, summary string
	}{
		{Drift("bal", "", "2 keys", 1, 0, 1, nil), "drift/bal", "bal", KindDrift, "warning",
			"derivation bal: 2 keys drifted from the ledger (1 missing, 0 extra, 1 mismatched)"},
		{Drift("bal", "critical", "1 key", 0, 1, 0, nil), "drift/bal", "bal", KindDrift, "critical",
			"derivation bal: 1 key drifted from the ledger (0 missing, 1 extra, 0 mismatched)"},
		{StoreError("bal", "connection refused", nil), "store_error/bal", "bal", KindStoreError, "warning",
			"derivation bal: the derived store cannot be checked: connection refused"},
		{DerivationError("bal", "budget", "too many errors", nil), "derivation_error/bal", "bal", KindDerivationError, "warning",
			"derivation bal failed (budget): too many errors"},
		{IncrementalMismatch("bal", "3 keys", nil), "integrity/derivation/bal", "bal", KindIntegrity, "critical",
			"derivation bal: the incremental state differs from a full fold on 3 keys"},
		{LogViolation("pay", "id_conflict", "id 7 reused", nil), "integrity/pay/id_conflict", "pay", KindIntegrity, "critical",
			"log pay: id 7 reused"},
		{CheckFinding("scrub", "pay", "leaf_mismatch", 2, "", nil), "integrity/checks/scrub/pay/leaf_mismatch", "pay", KindIntegrity, "critical",
			"scrub found 2 leaf_mismatch in log pay"},
		{CheckFinding("scrub", "", "index_missing", 1, "", nil), "integrity/checks/scrub/-/index_missing", "scrub", KindIntegrity, "critical",
			"scrub found 1 index_missing in log -"},
		{CheckFinding("peers", "pay", "peer_checkpoint_bad", 1, SeverityWarning, nil), "integrity/checks/peers/pay/peer_checkpoint_bad", "pay", KindIntegrity, "warning",
			"peers found 1 peer_checkpoint_bad in log pay"},
		{DiskFull("no space left"), DiskFullID, "ledger", KindStorage, "critical", "appends refused: no space left"},
	} {
		a := tc.a
		if a.ID != tc.id || a.Kind != tc.kind || a.Subject != tc.subject || a.Labels["severity"] != tc.severity || a.Summary != tc.summary {
			t.Errorf("%s: got %q %s %q severity %q %q", tc.id, a.ID, a.Kind, a.Subject, a.Labels["severity"], a.Summary)
		}
		if err := normalize(&a); err != nil {
			t.Errorf("%s: invalid as built: %v", tc.id, err)
		}
	}
	if p := CheckPrefix("scrub"); CheckFinding("scrub", "pay", "x", 1, "", nil).ID[:len(p)] != p {
		t.Errorf("CheckPrefix %q does not start the checker's ids", p)
	}
}

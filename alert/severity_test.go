package alert_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/auditd/auditd/alert"
)

// TestSeverity checks that every alert carries a severity label, in the
// Manager and in a webhook's body: the kind's (integrity and storage
// critical, the others warning) when the raiser names none, the raiser's
// otherwise, and a value Alertmanager would not route on is refused.
func TestSeverity(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	e := newEnv(t, alert.Options{Sinks: []alert.Sink{fastWebhook(rc, "am")}})
	for _, c := range []struct {
		a    alert.Alert
		want string
	}{
		{alert.Alert{ID: "integrity/p/offset_conflict", Kind: alert.KindIntegrity, Subject: "p"}, "critical"},
		{alert.Alert{ID: "disk_full", Kind: alert.KindStorage, Subject: "ledger"}, "critical"},
		{alert.Alert{ID: "drift/bal", Kind: alert.KindDrift, Subject: "bal"}, "warning"},
		{alert.Alert{ID: "derivation_error/bal", Kind: alert.KindDerivationError, Subject: "bal"}, "warning"},
		{alert.Alert{ID: "store_error/bal", Kind: alert.KindStoreError, Subject: "bal", Labels: map[string]string{"derivation": "bal"}}, "warning"},
		{alert.Alert{ID: "drift/ledger-mirror", Kind: alert.KindDrift, Subject: "ledger-mirror", Labels: map[string]string{"severity": "critical"}}, "critical"},
		{alert.Alert{ID: "integrity/peer/checkpoint_bad", Kind: alert.KindIntegrity, Subject: "peer", Labels: map[string]string{"severity": "info"}}, "info"},
	} {
		if got := e.fire(c.a); got.Labels["severity"] != c.want {
			t.Errorf("%s: fired with labels %v, want severity %s", c.a.ID, got.Labels, c.want)
		}
		if got := e.get(c.a.ID); got.Labels["severity"] != c.want {
			t.Errorf("%s: stored with labels %v, want severity %s", c.a.ID, got.Labels, c.want)
		}
		var msg struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
			} `json:"alerts"`
		}
		if body := rc.next(t); json.Unmarshal(body, &msg) != nil || len(msg.Alerts) != 1 || msg.Alerts[0].Labels["severity"] != c.want {
			t.Errorf("%s: webhook body %s, want severity %s", c.a.ID, body, c.want)
		}
	}
	_, err := e.m.Fire(alert.Alert{ID: "drift/x", Kind: alert.KindDrift, Subject: "x", Labels: map[string]string{"severity": "page"}})
	if !errors.Is(err, alert.ErrInvalid) {
		t.Errorf("severity page: %v, want ErrInvalid", err)
	}

	// Sync fills it in as Fire does, and it survives a restart.
	if err := e.m.Sync(alert.KindDerivationError, "ord", []alert.Alert{{ID: "derivation_error/ord"}}); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if got := e.get("derivation_error/ord"); got.Labels["severity"] != "warning" {
		t.Errorf("synced alert after a restart: labels %v, want severity warning", got.Labels)
	}
}

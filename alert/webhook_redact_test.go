package alert_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/alert"
)

// TestWebhookErrorsHideSecrets (issue 28): a webhook URL's secrets (the
// password or token of its userinfo, a token in its query) are in no
// error of Validate or Notify (which the manager logs): a receiver that
// is down, one that answers 500, a URL that does not parse.
func TestWebhookErrorsHideSecrets(t *testing.T) {
	const secret = "s3cr3t-PASS"
	rc := newReceiver(t, func(n int, w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) })
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for name, u := range map[string]string{
		"500, password":          strings.Replace(rc.srv.URL, "http://", "http://am:"+secret+"@", 1) + "/hook",
		"down, password":         strings.Replace(down.URL, "http://", "http://am:"+secret+"@", 1) + "/hook",
		"down, token as user":    strings.Replace(down.URL, "http://", "http://"+secret+"@", 1) + "/hook",
		"down, token in a query": down.URL + "/hook?token=" + secret,
		"bad port":               strings.Replace(down.URL, "http://", "http://am:"+secret+"@", 1) + ":x/hook",
		"not http":               "ftp://am:" + secret + "@host/hook",
	} {
		cfg := alert.WebhookConfig{Name: "am", URL: u, MaxRetries: -1, InitialBackoff: time.Millisecond}
		err := alert.NewWebhook(cfg).Notify(context.Background(), []alert.Alert{{ID: "a/b", Kind: alert.KindDrift, Summary: "s"}})
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: Notify error %q shows the secret", name, err)
		}
		if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: Validate error %q shows the secret", name, err)
		}
	}
}

// TestWebhookExternalURLHidesPassword (issue 28): the externalURL and
// generatorURL a webhook message carries show no password of the
// configured external URL.
func TestWebhookExternalURLHidesPassword(t *testing.T) {
	const secret = "s3cr3t-PASS"
	rc := newReceiver(t, nil)
	w := alert.NewWebhook(alert.WebhookConfig{Name: "am", URL: rc.srv.URL + "/hook", ExternalURL: "https://ops:" + secret + "@auditd.example/"})
	if err := w.Notify(context.Background(), []alert.Alert{{ID: "drift/b", Kind: alert.KindDrift, Summary: "s"}}); err != nil {
		t.Fatal(err)
	}
	body := string(rc.next(t))
	if strings.Contains(body, secret) || !strings.Contains(body, `"https://ops:xxxxx@auditd.example/v1/alerts/drift/b"`) {
		t.Errorf("webhook body: %s", body)
	}
}

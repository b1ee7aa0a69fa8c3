package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/auditd/auditd/client"
)

// TestErrorsHideURLPassword (issue 28): the client's errors never show
// the password of its server's URL, nor a token in its query: a server
// that answers 404 (ErrNotFound still matches) or 500, one that is down,
// a URL that does not parse.
func TestErrorsHideURLPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-PASS"
	s := newServer(t, nil)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	auth := func(u string) string { return strings.Replace(u, "http://", "http://auditor:"+secret+"@", 1) }
	for name, base := range map[string]string{
		"not found":   auth(s.url),
		"500":         auth(failing.URL),
		"down":        auth(down.URL),
		"query token": down.URL + "/?token=" + secret,
		"bad port":    auth(down.URL) + ":port",
	} {
		c := client.New(base, s.key.Verifier)
		_, _, err := c.Checkpoint(ctx(t), "payments")
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: %v shows the secret", name, err)
		}
		if name == "not found" && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: %v is not ErrNotFound", name, err)
		}
	}
}

package submit

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
)

const password = "s3cr3t-PASS"

// withPassword puts user:password into base's userinfo.
func withPassword(base string) string {
	return strings.Replace(base, "http://", "http://auditor:"+password+"@", 1)
}

// lockedBuffer is a log sink safe for the submitter's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestSubmitHidesURLPassword (issue 28): a witness URL's password is
// shown nowhere, in GET /v1/logs/{log}'s witness status (url, last_error)
// nor in the log, for a witness that cosigns, one that is down, one that
// answers 500 and one whose URL does not parse; the submitter still
// connects with the password.
func TestSubmitHidesURLPassword(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	good := newWitness(t, "good.example", l.Origin(), key.Verifier)
	var sawPassword bool
	var mu sync.Mutex
	inner := good.ts.Config.Handler
	good.ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, p, ok := r.BasicAuth(); ok && p == password {
			mu.Lock()
			sawPassword = true
			mu.Unlock()
		}
		inner.ServeHTTP(w, r)
	})
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	urls := map[string]string{
		"good.example":  withPassword(good.ts.URL),
		"down.example":  withPassword(down.URL),
		"error.example": withPassword(failing.URL),
		"parse.example": withPassword(down.URL) + ":bad-port",
	}
	ws := []Witness{{URL: urls["good.example"], Verifier: good.verifier}}
	for name, u := range urls {
		if name == "good.example" {
			continue
		}
		_, vkey, _ := witness.GenerateKey(rand.Reader, name)
		v, _ := witness.NewVerifier(vkey)
		ws = append(ws, Witness{URL: u, Verifier: v})
	}
	ev := newEvents()
	opts := ev.options()
	logs := &lockedBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	sub, err := New(storeLogs(store), ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sub)
	appendN(t, l, 3)
	size := l.Checkpoint().Size
	ev.wait(t, "every failing witness's error and the good cosignature", func(c map[string]uint64, errs map[string]int) bool {
		return errs["payments down.example"] > 0 && errs["payments error.example"] > 0 && errs["payments parse.example"] > 0 &&
			c["payments good.example"] >= size
	})
	mu.Lock()
	if !sawPassword {
		t.Error("the witness was not sent the password")
	}
	mu.Unlock()
	st, err := json.Marshal(sub.Status("payments", size))
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"status": string(st), "log": logs.String()} {
		if strings.Contains(s, password) {
			t.Errorf("the %s shows the password:\n%s", what, s)
		}
	}
	if !strings.Contains(string(st), "auditor:xxxxx@") {
		t.Errorf("status does not show the redacted URLs: %s", st)
	}
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditd/auditd/witness"
)

// recorder is a loopback HTTP receiver (a webhook, a witness) that keeps
// the bodies it was sent; it answers status.
type recorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newRecorder(t *testing.T, status int) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, req.URL.Path+" "+string(b))
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies)
}

// count returns how many bodies contain s.
func (r *recorder) count(s string) int {
	n := 0
	for _, b := range r.got() {
		if strings.Contains(b, s) {
			n++
		}
	}
	return n
}

// TestReloadLiveParts runs the binary (race detector on in its test, not in
// the binary) and changes, on SIGHUP and POST /-/reload, every key a
// reload applies live: a derivation spec edited in place (the file list
// unchanged) changes the verdict; a spec file added shows in
// /v1/derivations; a bad spec is refused with file:line:col and the old set
// keeps running; the checks' schedule changes; a webhook URL changed sends
// the next alert to the new receiver and none to the old; a witness list
// changed sends checkpoints to the new witness and none to the old; a
// change of witness.name is refused by name; retention added prunes.
func TestReloadLiveParts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The derived store holds acct a at 2: two events of a, folded with
	// step state + 1, are clean; with state + 2 they are not.
	storeFile := write("bal.jsonl", `{"key":"a","n":2}`+"\n")
	specBody := func(step string) string {
		return "derivations:\n  - name: bal\n    sources: [pay]\n    store: {file: {path: " + storeFile + "}}\n" +
			"    key: event.acct\n    initial: \"0\"\n    step: " + step + "\n    interval: 1h\n    confirm_runs: 1\n"
	}
	balSpec := write("bal.yaml", specBody("state + 1"))
	cntSpec := write("cnt.yaml", "derivations:\n  - name: cnt\n    sources: [pay]\n    store: {file: {path: "+storeFile+"}}\n"+
		"    key: event.acct\n    initial: \"0\"\n    step: state + 1\n    interval: 1h\n")
	hookA, hookB := newRecorder(t, http.StatusOK), newRecorder(t, http.StatusOK)
	witA, witB := newRecorder(t, http.StatusServiceUnavailable), newRecorder(t, http.StatusServiceUnavailable)
	_, wkey, err := witness.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	type parts struct {
		specs, hook, witness, scrub, witnessName, retention, witnessCA string
	}
	cfgPath := filepath.Join(dir, "auditd.yaml")
	writeCfg := func(p parts) {
		t.Helper()
		body := "data_dir: " + filepath.Join(dir, "data") + "\nlisten: 127.0.0.1:0\ncheckpoint_interval: 20ms\ncheckpoint_guard_dir: off\n" +
			"write_token: w\nderivations: [" + p.specs + "]\n" +
			"webhooks:\n  - name: ops\n    url: " + p.hook + "\n    max_retries: 0\n" +
			"checks:\n  scrub_interval: " + p.scrub + "\n" +
			"witness:\n  witnesses:\n    - url: " + p.witness + "\n      verifier_key: " + wkey + "\n"
		if p.witnessCA != "" {
			body += "      tls_ca_file: " + p.witnessCA + "\n"
		}
		if p.witnessName != "" {
			body += "  name: " + p.witnessName + "\n"
		}
		body += p.retention
		write("auditd.yaml", body)
	}
	cur := parts{specs: balSpec, hook: hookA.srv.URL, witness: witA.srv.URL, scrub: "1h"}
	writeCfg(cur)
	d, err := startDaemonArgs(ctx, bin, 1, "serve", "--config", cfgPath, "--log-format", "text")
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, strings.Join(d.stderr.lines(), "\n"))
	}
	defer d.kill()

	do := func(method, path string, body io.Reader) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, d.url+path, body)
		req.Header.Set("Authorization", "Bearer w")
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	reload := func() (int, string) { t.Helper(); return do(http.MethodPost, "/-/reload", nil) }
	hups := 0
	hup := func(want string) {
		t.Helper()
		hups++
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for {
			n := 0
			for _, l := range d.stderr.lines() {
				if strings.Contains(l, "trigger=SIGHUP") {
					if n++; n == hups && !strings.Contains(l, want) {
						t.Fatalf("SIGHUP %d logged %q, want %q", hups, l, want)
					}
				}
			}
			if n >= hups {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no reload logged after SIGHUP %d", hups)
			case <-d.exited:
				t.Fatalf("SIGHUP ended serve: %v", d.err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// waitFor polls cond until it holds (the daemon works in the
	// background); the test's deadline bounds it.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not before the deadline", what)
			case <-d.exited:
				t.Fatalf("%s: serve exited: %v", what, d.err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	derivations := func() []string {
		t.Helper()
		code, body := do(http.MethodGet, "/v1/derivations", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/derivations: %d %s", code, body)
		}
		var v struct{ Derivations []struct{ Name string } }
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, j := range v.Derivations {
			names = append(names, j.Name)
		}
		return names
	}
	// verdict runs bal now and returns its report's state and drift.
	verdict := func() (state string, drift string) {
		t.Helper()
		_, before := do(http.MethodGet, "/v1/derivations/bal/runs/latest", nil)
		if code, body := do(http.MethodPost, "/v1/derivations/bal/run", nil); code != http.StatusAccepted {
			t.Fatalf("POST run: %d %s", code, body)
		}
		var rep struct {
			State     string          `json:"state"`
			StartedAt time.Time       `json:"started_at"`
			Drift     json.RawMessage `json:"drift"`
		}
		waitFor("a new report of bal", func() bool {
			code, body := do(http.MethodGet, "/v1/derivations/bal/runs/latest", nil)
			return code == http.StatusOK && body != before && json.Unmarshal([]byte(body), &rep) == nil
		})
		return rep.State, string(rep.Drift)
	}
	// scrubInterval is the scrub checker's interval in /v1/checks.
	scrubInterval := func() float64 {
		t.Helper()
		_, body := do(http.MethodGet, "/v1/checks", nil)
		var v struct {
			Checks []struct {
				Name            string  `json:"name"`
				IntervalSeconds float64 `json:"interval_seconds"`
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("GET /v1/checks: %v %s", err, body)
		}
		for _, c := range v.Checks {
			if c.Name == "scrub" {
				return c.IntervalSeconds
			}
		}
		t.Fatalf("no scrub checker in /v1/checks: %s", body)
		return 0
	}
	post := func(log, body string) {
		t.Helper()
		if code, _, err := tokenPost(ctx, d, "w", log, []byte(body)); err != nil || code != http.StatusOK {
			t.Fatalf("POST %s: %d %v", log, code, err)
		}
	}
	// conflict raises an id_conflict alert about log.
	conflict := func(log string) {
		t.Helper()
		post(log, `{"id":"e","payload":{"n":1}}`+"\n")
		if code, _, err := tokenPost(ctx, d, "w", log, []byte(`{"id":"e","payload":{"n":2}}`+"\n")); err != nil || code != http.StatusConflict {
			t.Fatalf("POST of a conflicting id to %s: %d %v, want 409", log, code, err)
		}
	}

	post("pay", `{"id":"p1","payload":{"acct":"a"}}`+"\n"+`{"id":"p2","payload":{"acct":"a"}}`+"\n")
	if got := derivations(); !slices.Equal(got, []string{"bal"}) {
		t.Fatalf("derivations at start: %v", got)
	}
	waitFor("bal clean at start (once pay is checkpointed)", func() bool { st, _ := verdict(); return st == "clean" })
	if iv := scrubInterval(); iv != 3600 {
		t.Fatalf("scrub every %vs at start, want 3600", iv)
	}
	waitFor("the first witness tried", func() bool { return witA.count("/add-checkpoint") > 0 })

	// 1. The spec edited in place (same file list), on SIGHUP: the new step
	// judges the store.
	write("bal.yaml", specBody("state + 2"))
	hup("configuration reloaded")
	if st, drift := verdict(); st == "clean" || !strings.Contains(drift, `"key":"a"`) {
		t.Errorf("bal after its spec was edited: %s %s, want drift on a", st, drift)
	}

	// 2. A spec file added, and the checks' schedule, on POST /-/reload.
	cur.specs, cur.scrub = balSpec+", "+cntSpec, "2h"
	writeCfg(cur)
	if code, body := reload(); code != http.StatusOK || !strings.Contains(body, "derivations") || !strings.Contains(body, "checks") {
		t.Fatalf("reload adding cnt and changing checks: %d %s", code, body)
	}
	if got := derivations(); !slices.Equal(got, []string{"bal", "cnt"}) {
		t.Errorf("derivations after adding cnt.yaml: %v", got)
	}
	if iv := scrubInterval(); iv != 7200 {
		t.Errorf("scrub every %vs after scrub_interval 1h -> 2h, want 7200", iv)
	}

	// 3. A spec that does not compile: refused with file:line:col, the two
	// derivations still running and judging.
	bad := write("bad.yaml", "derivations:\n  - name: bad\n    sources: [pay]\n    store: {file: {path: "+storeFile+"}}\n"+
		"    key: event.acct\n    initial: \"0\"\n    step: state +* 1\n    interval: 1h\n")
	good := cur
	cur.specs = good.specs + ", " + bad
	writeCfg(cur)
	code, body := reload()
	if code != http.StatusBadRequest || !regexp.MustCompile(`bad\.yaml:\d+:\d+`).MatchString(body) {
		t.Errorf("reload with a bad spec: %d %s, want 400 naming bad.yaml:line:col", code, body)
	}
	if got := derivations(); !slices.Equal(got, []string{"bal", "cnt"}) {
		t.Errorf("derivations after a refused reload: %v", got)
	}
	if st, _ := verdict(); st == "" {
		t.Error("bal did not run after a refused reload")
	}

	// 3b. Refused half-way: the webhook and the derivations are valid
	// changes, the witness list is not (its CA file is missing, found only
	// when the submitter is built, after the webhooks). Nothing is
	// applied: the derivations stay, and step 4's first alert still goes to
	// the first receiver.
	half := good
	half.specs, half.hook, half.witnessCA = balSpec, hookB.srv.URL, filepath.Join(dir, "missing-ca.pem")
	writeCfg(half)
	code, body = reload()
	if code != http.StatusBadRequest || !strings.Contains(body, "missing-ca.pem") {
		t.Errorf("reload with a witness CA file missing: %d %s, want 400 naming it", code, body)
	}
	if got := derivations(); !slices.Equal(got, []string{"bal", "cnt"}) {
		t.Errorf("derivations after a reload refused half-way: %v", got)
	}

	// 4. The webhook URL changed: the next alert goes to B only.
	cur = good
	writeCfg(cur) // as running: a SIGHUP now would change nothing
	conflict("x1")
	waitFor("the alert at the first receiver", func() bool { return hookA.count("x1") > 0 })
	cur.hook = hookB.srv.URL
	writeCfg(cur)
	hup("configuration reloaded")
	aBefore := len(hookA.got())
	conflict("x2")
	waitFor("the next alert at the new receiver", func() bool { return hookB.count("x2") > 0 })
	if n := hookB.count("x1"); n != 0 {
		t.Errorf("the new receiver got %d notifications of the alert raised before", n)
	}

	// 5. The witness list changed: checkpoints go to B, none to A.
	cur.witness = witB.srv.URL
	writeCfg(cur)
	if code, body := reload(); code != http.StatusOK || !strings.Contains(body, "witnesses") {
		t.Fatalf("reload changing the witness: %d %s", code, body)
	}
	witABefore := witA.count("/add-checkpoint")
	post("pay", `{"id":"p3","payload":{"acct":"b"}}`+"\n")
	waitFor("the new witness asked", func() bool { return witB.count("/add-checkpoint") >= 2 })
	if n := witA.count("/add-checkpoint"); n != witABefore {
		t.Errorf("the old witness got %d more requests after the reload", n-witABefore)
	}
	if n := len(hookA.got()); n != aBefore {
		t.Errorf("the old webhook got %d notifications after the reload: %v", n-aBefore, hookA.got()[aBefore:])
	}

	// 6. witness.name cannot change live: refused by name, nothing applied.
	next := cur
	next.witnessName, next.hook = "other", hookA.srv.URL
	writeCfg(next)
	code, body = reload()
	if code != http.StatusBadRequest || !strings.Contains(body, "witness.name changed") || strings.Contains(body, "webhooks") {
		t.Errorf("reload changing witness.name: %d %s, want 400 naming witness.name alone", code, body)
	}
	// 7. Derivation removed: /v1/derivations and /metrics forget it, and
	// its drift alert (bal drifts since step 1) resolves: nothing checks
	// it any more.
	balDrift := func() int {
		t.Helper()
		_, body := do(http.MethodGet, "/v1/alerts?state=firing&kind=drift&subject=bal", nil)
		var v struct {
			Alerts []json.RawMessage `json:"alerts"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("GET /v1/alerts: %v %s", err, body)
		}
		return len(v.Alerts)
	}
	waitFor("bal's drift alert firing", func() bool {
		if balDrift() > 0 {
			return true
		}
		verdict() // a drift is confirmed over runs
		return balDrift() > 0
	})
	cur.specs = cntSpec
	writeCfg(cur)
	if code, body := reload(); code != http.StatusOK {
		t.Fatalf("reload removing bal: %d %s", code, body)
	}
	if got := derivations(); !slices.Equal(got, []string{"cnt"}) {
		t.Errorf("derivations after removing bal.yaml: %v", got)
	}
	if n := balDrift(); n != 0 {
		t.Errorf("%d drift alerts of the removed derivation bal still firing", n)
	}
	// 8. Retention added: log r (no derivation reads it) keeps its last
	// entry's payload only.
	post("r", `{"id":"r1","payload":{}}`+"\n"+`{"id":"r2","payload":{}}`+"\n"+`{"id":"r3","payload":{}}`+"\n")
	cur.retention = "retention:\n  interval: 50ms\n  logs:\n    - log: r\n      keep_entries: 1\n"
	writeCfg(cur)
	hup("retention (1 policy)")
	waitFor("log r pruned below entry 2", func() bool {
		m, err := d.getText(ctx, "/metrics")
		return err == nil && strings.Contains(m, `auditd_ledger_prune_watermark_entries{log="r"} 2`)
	})

	metrics, err := d.getText(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(metrics, `derivation="bal"`) {
		t.Error("/metrics still has series of the removed derivation bal")
	}
	if !strings.Contains(metrics, "auditd_config_last_reload_successful 1") {
		t.Error("the last reload is not reported successful")
	}
	if err := d.stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
	for _, l := range d.stderr.lines() {
		if strings.Contains(l, "panic") || strings.Contains(l, "DATA RACE") {
			t.Errorf("serve logged %q", l)
		}
	}
}

// TestReloadChangesNamed: a change inside witness: is named by its key
// (witness.witnesses is live, witness.name is not), and a spec file edited
// in place, its path unchanged, changes specDigest while an untouched one
// keeps it.
func TestReloadChangesNamed(t *testing.T) {
	a, b := defaultConfig(), defaultConfig()
	b.Witness.Witnesses = []WitnessEndpoint{{URL: "http://w.example"}}
	if got := configChanges(a, b); !slices.Equal(got, []string{"witness.witnesses"}) || !liveKeys[got[0]] {
		t.Errorf("witnesses changed: %v", got)
	}
	b = defaultConfig()
	b.Witness.Name, b.Listen = "other", "127.0.0.1:1"
	got := configChanges(a, b)
	if !slices.Contains(got, "witness.name") || !slices.Contains(got, "listen") || liveKeys["witness.name"] || liveKeys["listen"] {
		t.Errorf("witness.name and listen changed: %v", got)
	}
	if got := configChanges(a, defaultConfig()); len(got) != 0 {
		t.Errorf("no change: %v", got)
	}

	dir := t.TempDir()
	f := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(f, []byte("derivations: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := specDigest([]string{f})
	if again := specDigest([]string{f}); again != before {
		t.Error("specDigest of an unchanged file changed")
	}
	if err := os.WriteFile(f, []byte("derivations: [] \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if specDigest([]string{f}) == before {
		t.Error("specDigest did not see the file edited in place")
	}
}

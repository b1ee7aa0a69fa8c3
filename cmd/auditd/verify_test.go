package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/bundletest"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/compare"
)

// The auditd verify tests run the daemon in-process on loopback, POST the
// events over HTTP, and compare a balances derivation with a table in the
// real PostgreSQL of the test environment (AUDITD_TEST_PG overrides the
// DSN). Tampering is done by an HTTP proxy in front of the real server.

// verifyEvents are the payments the tests post: the balances are alice 70,
// bob 75, carol 7; after the first three entries (the watermark tests)
// alice 70, bob 50.
var verifyEvents = []string{
	`{"id":"p-1","payload":{"account":"alice","amount":100}}`,
	`{"id":"p-2","payload":{"account":"bob","amount":50}}`,
	`{"id":"p-3","payload":{"account":"alice","amount":-30}}`,
	`{"id":"p-4","payload":{"account":"carol","amount":7}}`,
	`{"id":"p-5","payload":{"account":"bob","amount":25}}`,
}

var verifyBalances = map[string]int64{"alice": 70, "bob": 75, "carol": 7}

func verifyPG() string {
	if v := os.Getenv("AUDITD_TEST_PG"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// verifyDaemon is auditd serve running in-process with payments posted.
type verifyDaemon struct {
	url      string
	dataDir  string
	vkeyFile string
	stop     func() // stops the daemon and waits for it; idempotent
}

// startVerifyDaemon starts serve on a fresh data dir, creating the empty
// logs emptyLogs, and posts verifyEvents to log payments (in two requests)
// and one event to log orders, which the derivation does not read.
func startVerifyDaemon(t *testing.T, emptyLogs ...string) *verifyDaemon {
	t.Helper()
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen, cfg.Logs = t.TempDir(), "127.0.0.1:0", emptyLogs
	cfg.CheckpointInterval = 10 * time.Millisecond
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	var once sync.Once
	d := &verifyDaemon{url: "http://" + addr, dataDir: cfg.DataDir, vkeyFile: cfg.KeyFile + ".pub"}
	d.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve returned %v", err)
			}
		})
	}
	t.Cleanup(d.stop)
	post(t, d.url+"/v1/logs/payments/entries?wait=checkpoint", strings.Join(verifyEvents[:3], "\n"))
	post(t, d.url+"/v1/logs/payments/entries?wait=checkpoint", strings.Join(verifyEvents[3:], "\n"))
	post(t, d.url+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","payload":{"account":"alice","amount":1000}}`)
	return d
}

// verifyTable is a balances table (account text, balance bigint) of its
// own in the test database, dropped at the test's end.
type verifyTable struct {
	t    *testing.T
	conn *pgx.Conn
	name string // unquoted; it needs no quoting
}

func newVerifyTable(t *testing.T) *verifyTable {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, verifyPG())
	if err != nil {
		t.Fatalf("PostgreSQL for the tests (AUDITD_TEST_PG): %v", err)
	}
	tb := &verifyTable{t: t, conn: conn, name: fmt.Sprintf("auditd_verify_%d_%s", os.Getpid(), strings.ToLower(rand.Text()[:10]))}
	tb.exec("CREATE TABLE " + tb.name + " (account text PRIMARY KEY, balance bigint NOT NULL)")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn.Exec(ctx, "DROP TABLE IF EXISTS "+tb.name)
		conn.Close(ctx)
	})
	return tb
}

func (tb *verifyTable) exec(sql string, args ...any) {
	tb.t.Helper()
	if _, err := tb.conn.Exec(context.Background(), sql, args...); err != nil {
		tb.t.Fatalf("%s: %v", sql, err)
	}
}

// set replaces the table's rows, in one transaction: a daemon comparing
// meanwhile sees the old rows or the new, never the table half filled (a
// run between the TRUNCATE and an INSERT reported that key missing).
func (tb *verifyTable) set(rows map[string]int64) {
	tb.t.Helper()
	tb.exec("BEGIN")
	tb.exec("TRUNCATE " + tb.name)
	for k, v := range rows {
		tb.exec("INSERT INTO "+tb.name+" VALUES ($1, $2)", k, v)
	}
	tb.exec("COMMIT")
}

// verifySpecOpts are the knobs of the spec file the tests write.
type verifySpecOpts struct {
	dsn            string // default verifyPG()
	sources        string // default [payments]
	grace          string // default 0s
	step           string // default state + event.amount
	watermarkQuery string
	extra          string // more derivations, appended verbatim
}

// writeVerifySpec writes a spec with derivation "balances", the sum of
// event.amount by event.account over log payments, compared with table.
func writeVerifySpec(t *testing.T, table string, o verifySpecOpts) string {
	t.Helper()
	if o.dsn == "" {
		o.dsn = verifyPG()
	}
	if o.grace == "" {
		o.grace = "0s"
	}
	if o.step == "" {
		o.step = "state + event.amount"
	}
	if o.sources == "" {
		o.sources = "[payments]"
	}
	spec := fmt.Sprintf(`derivations:
  - name: balances
    sources: %s
    key: event.account
    initial: "0"
    step: %s
    grace: %s
    store:
      postgres:
        dsn: %q
        table: %s
`, o.sources, o.step, o.grace, o.dsn, table)
	if o.watermarkQuery != "" {
		spec += fmt.Sprintf("        watermark_query: %q\n", o.watermarkQuery)
	}
	spec += o.extra
	path := filepath.Join(t.TempDir(), "derivations.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// verifyResult is what one runVerify call gave.
type verifyResult struct {
	code           int
	stdout, stderr string
}

func (r verifyResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

func runVerifyTest(t *testing.T, args ...string) verifyResult {
	t.Helper()
	var out, errb bytes.Buffer
	code := runVerify(append([]string{"--timeout", "2m"}, args...), &out, &errb)
	return verifyResult{code, out.String(), errb.String()}
}

// remoteArgs are the arguments that verify spec against server with the
// daemon's own verifier key, read from its file.
func (d *verifyDaemon) remoteArgs(server, spec string, more ...string) []string {
	return append([]string{"--config", spec, "--server", server, "--verifier-key", "@" + d.vkeyFile}, more...)
}

// verifyJSONReport is the --json output.
type verifyJSONReport struct {
	ExitCode int                `json:"exit_code"`
	Reports  []*rederive.Report `json:"reports"`
}

func readVerifyJSON(t *testing.T, path string) verifyJSONReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r verifyJSONReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, b)
	}
	if len(r.Reports) != 1 {
		t.Fatalf("--json output holds %d reports, want 1\n%s", len(r.Reports), b)
	}
	return r
}

func TestVerifyClean(t *testing.T) {
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	jsonFile := filepath.Join(t.TempDir(), "out", "report.json")

	r := runVerifyTest(t, d.remoteArgs(d.url, spec, "--json", jsonFile)...)
	if r.code != exitClean {
		t.Fatalf("clean table: %v", r)
	}
	if !regexpMatch(`(?m)^balances\s+clean\s+5\s+3\s+3\s+0\s+0\s+0\s+0\s`, r.stdout) {
		t.Errorf("table does not show balances clean with 5 events, 3 keys, 3 matched:\n%s", r.stdout)
	}
	j := readVerifyJSON(t, jsonFile)
	rep := j.Reports[0]
	if j.ExitCode != 0 || rep.State != rederive.StateClean || rep.Events != 5 || rep.Keys != 3 || rep.Stats.Matched != 3 || len(rep.Drift) != 0 {
		t.Errorf("JSON: exit_code %d, state %s, events %d, keys %d, matched %d, drift %v", j.ExitCode, rep.State, rep.Events, rep.Keys, rep.Stats.Matched, rep.Drift)
	}
	// The pin is the signed checkpoint of payments, not of orders.
	if len(rep.Pins) != 1 || rep.Pins[0].Log != "payments" || rep.Pins[0].Size != 5 || !strings.Contains(strings.SplitN(rep.Pins[0].Checkpoint, "\n\n", 2)[0], "/payments\n5\n") {
		t.Errorf("pins = %+v", rep.Pins)
	}

	// A young wrong value is pending, which does not fail: exit 0.
	tb.exec("UPDATE "+tb.name+" SET balance = 999 WHERE account = $1", "bob")
	pending := writeVerifySpec(t, tb.name, verifySpecOpts{grace: "1h"})
	r = runVerifyTest(t, d.remoteArgs(d.url, pending, "--json", jsonFile)...)
	if r.code != exitClean {
		t.Fatalf("pending mismatch: %v", r)
	}
	if !strings.Contains(r.stdout, "pending   mismatch bob: value expected 75, store has 999") {
		t.Errorf("table does not list bob as pending:\n%s", r.stdout)
	}
	j = readVerifyJSON(t, jsonFile)
	rep = j.Reports[0]
	if j.ExitCode != 0 || rep.State != rederive.StatePending || rep.Pending != 1 || rep.Confirmed != 0 ||
		len(rep.Drift) != 1 || rep.Drift[0].Key != "bob" || rep.Drift[0].Status != "pending" {
		t.Errorf("JSON: exit_code %d, state %s, pending %d, confirmed %d, drift %+v", j.ExitCode, rep.State, rep.Pending, rep.Confirmed, rep.Drift)
	}
	// The same mismatch with no grace is confirmed drift.
	if r := runVerifyTest(t, d.remoteArgs(d.url, spec)...); r.code != exitDrift {
		t.Errorf("with grace 0s: %v", r)
	}
}

func TestVerifyDrift(t *testing.T) {
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(map[string]int64{"alice": 70, "bob": 999}) // bob wrong, carol missing
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	dir := t.TempDir()
	jsonFile, junitFile, mdFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.xml"), filepath.Join(dir, "r.md")

	r := runVerifyTest(t, d.remoteArgs(d.url, spec, "--json", jsonFile, "--junit", junitFile, "--markdown", mdFile)...)
	if r.code != exitDrift {
		t.Fatalf("wrong value and missing row: %v", r)
	}
	for _, want := range []string{
		"balances: 2 confirmed, 0 pending",
		"confirmed mismatch bob: value expected 75, store has 999",
		"confirmed missing  carol: expected 7, absent from the store",
		`from payments#1 id "p-2"`,
		`from payments#4 id "p-5"`,
		`from payments#3 id "p-4"`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !regexpMatch(`(?m)^balances\s+drift\s+5\s+3\s+1\s+1\s+0\s+1\s+0\s`, r.stdout) {
		t.Errorf("table does not show balances drift with 1 matched, 1 missing, 1 mismatched:\n%s", r.stdout)
	}

	// --json: the drift list, exactly, and lineage proofs that check
	// against the pinned checkpoint.
	j := readVerifyJSON(t, jsonFile)
	rep := j.Reports[0]
	if j.ExitCode != exitDrift || rep.State != rederive.StateDrift || rep.Confirmed != 2 || rep.Pending != 0 {
		t.Errorf("JSON: exit_code %d, state %s, confirmed %d, pending %d", j.ExitCode, rep.State, rep.Confirmed, rep.Pending)
	}
	type drift struct {
		Kind, Key, Status string
		Expected, Actual  any
		Fields            []compare.FieldDiff
		Runs              int
		NewestID, Lineage string
	}
	var got []drift
	for _, dr := range rep.Drift {
		g := drift{Kind: string(dr.Kind), Key: dr.Key, Status: dr.Status, Expected: dr.Expected, Actual: dr.Actual, Fields: dr.Fields, Runs: dr.Runs}
		if dr.Newest != nil {
			g.NewestID = dr.Newest.ID
		}
		var ids []string
		for _, e := range dr.Lineage {
			ids = append(ids, fmt.Sprintf("%s#%d=%s", e.Log, e.Index, e.ID))
		}
		g.Lineage = strings.Join(ids, " ")
		got = append(got, g)
	}
	want := []drift{
		{Kind: "mismatch", Key: "bob", Status: "confirmed", Expected: 75.0, Actual: 999.0,
			Fields: []compare.FieldDiff{{Field: "", Expected: 75.0, Actual: 999.0}}, Runs: 1,
			NewestID: "p-5", Lineage: "payments#1=p-2 payments#4=p-5"},
		{Kind: "missing", Key: "carol", Status: "confirmed", Expected: 7.0, Runs: 1,
			NewestID: "p-4", Lineage: "payments#3=p-4"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON drift list:\n got %+v\nwant %+v", got, want)
	}
	if len(rep.Pins) != 1 {
		t.Fatalf("pins = %+v", rep.Pins)
	}
	pin := rep.Pins[0]
	for _, dr := range rep.Drift {
		for _, e := range dr.Lineage {
			if e.TreeSize != pin.Size {
				t.Errorf("%s: proof in a tree of size %d, pinned %d", dr.Key, e.TreeSize, pin.Size)
			}
			if err := merkle.VerifyInclusion(e.Index, e.TreeSize, e.LeafHash, e.Proof, pin.Root); err != nil {
				t.Errorf("%s: lineage entry %d: %v", dr.Key, e.Index, err)
			}
		}
	}

	// --junit: one failing test case named after the derivation.
	ju := readVerifyJUnit(t, junitFile)
	if ju.Tests != 1 || ju.Failures != 1 || ju.Errors != 0 || len(ju.Suites) != 1 || ju.Suites[0].Failures != 1 || len(ju.Suites[0].Cases) != 1 {
		t.Fatalf("JUnit counts: %+v", ju)
	}
	c := ju.Suites[0].Cases[0]
	if c.Name != "balances" || c.Failure == nil || c.Error != nil || c.Failure.Type != "drift" ||
		c.Failure.Message != "2 keys drifted (1 missing, 0 extra, 1 mismatched)" || !strings.Contains(c.Failure.Text, "carol") {
		t.Errorf("JUnit test case: %+v", c)
	}

	// --markdown: the summary row and the drift rows.
	b, err := os.ReadFile(mdFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `balances` | ❌ drift | 5 | 3 | 1 | 0 | 1 | 0 |",
		"| confirmed | mismatch | `bob` | value expected 75, store has 999 | `payments#1` `payments#4` |",
		"| confirmed | missing | `carol` | expected 7, absent from the store | `payments#3` |",
		"Computed at `payments` size 5.",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, b)
		}
	}
}

func TestVerifyConfigErrors(t *testing.T) {
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	good := writeVerifySpec(t, tb.name, verifySpecOpts{})

	// A CEL error: exit 2 with the file, line and column of the bad token.
	bad := writeVerifySpec(t, tb.name, verifySpecOpts{step: "state + evnt.amount"})
	r := runVerifyTest(t, d.remoteArgs(d.url, bad)...)
	if r.code != exitError || !strings.Contains(r.stderr, bad+":6:") || !strings.Contains(r.stderr, "evnt") {
		t.Errorf("CEL error: want exit 2 and %s:6:COL naming evnt on stderr; %v", bad, r)
	}

	// The store unreachable: exit 2, the store named in the report.
	down := writeVerifySpec(t, tb.name, verifySpecOpts{dsn: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"})
	r = runVerifyTest(t, d.remoteArgs(d.url, down)...)
	if r.code != exitError || !strings.Contains(r.stdout, "error (store)") || !strings.Contains(r.stdout, "127.0.0.1:1") {
		t.Errorf("store unreachable: want exit 2 and a store error naming 127.0.0.1:1; %v", r)
	}

	// --only skips the derivation whose store is down; without it the
	// run fails.
	two := writeVerifySpec(t, tb.name, verifySpecOpts{extra: `  - name: elsewhere
    sources: [payments]
    key: event.account
    initial: "0"
    step: state + 1
    store:
      postgres: {dsn: "postgres://postgres@127.0.0.1:1/test?sslmode=disable", table: t}
`})
	if r := runVerifyTest(t, d.remoteArgs(d.url, two, "--only", "balances")...); r.code != exitClean || strings.Contains(r.stdout, "elsewhere") {
		t.Errorf("--only balances: %v", r)
	}
	if r := runVerifyTest(t, d.remoteArgs(d.url, two)...); r.code != exitError || !strings.Contains(r.stdout, "elsewhere") {
		t.Errorf("both derivations, one store down: %v", r)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no verifier key", []string{"--config", good, "--server", d.url}, "--verifier-key is required"},
		{"malformed verifier key", []string{"--config", good, "--server", d.url, "--verifier-key", "not-a-key"}, "verifier key"},
		{"verifier key file missing", []string{"--config", good, "--server", d.url, "--verifier-key", "@" + filepath.Join(t.TempDir(), "nope")}, "verifier key"},
		{"no config", []string{"--server", d.url, "--verifier-key", "@" + d.vkeyFile}, "--config is required"},
		{"server and data dir", []string{"--config", good, "--server", d.url, "--data-dir", d.dataDir}, "exactly one of"},
		{"unknown --only", []string{"--config", good, "--server", d.url, "--verifier-key", "@" + d.vkeyFile, "--only", "nope"}, `no derivation "nope"`},
		{"data dir in use", []string{"--config", good, "--data-dir", d.dataDir}, "is the daemon running on it?"},
		{"bad flag", []string{"--config", good, "--bogus"}, "bogus"},
	} {
		r := runVerifyTest(t, c.args...)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: want exit 2 and %q on stderr; %v", c.name, c.want, r)
		}
	}
}

// tamperProxy serves GETs by fetching them from upstream and passing the
// body through rewrite (when it returns non-nil) before answering.
func tamperProxy(t *testing.T, upstream string, rewrite func(r *http.Request, body []byte) []byte) string {
	t.Helper()
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bundletest.ServeCombined(w, r, self) { // the lies of the parts, combined
			return
		}
		resp, err := http.Get(upstream + r.URL.RequestURI())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if resp.StatusCode == http.StatusOK && rewrite != nil {
			if b := rewrite(r, body); b != nil {
				body = b
			}
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	}))
	self = srv.URL
	t.Cleanup(srv.Close)
	return srv.URL
}

// isPaymentsRange reports a GET of a range of payments entries.
func isPaymentsRange(r *http.Request) bool {
	return r.URL.Path == "/v1/logs/payments/entries" && r.URL.Query().Has("start")
}

// rewriteEntries applies f to each entry of an entries-range response.
func rewriteEntries(t *testing.T, body []byte, f func(e *client.Entry)) []byte {
	var out struct {
		Entries []client.Entry `json:"entries"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Errorf("proxy: entries response: %v", err)
		return nil
	}
	for i := range out.Entries {
		f(&out.Entries[i])
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Errorf("proxy: %v", err)
		return nil
	}
	return b
}

// raiseAmount rewrites entry p-2's payload: bob's 50 becomes 5000.
func raiseAmount(t *testing.T, e *client.Entry) []byte {
	if e.ID != "p-2" || e.PayloadBase64 == nil {
		return nil
	}
	p, err := base64.StdEncoding.DecodeString(*e.PayloadBase64)
	if err != nil || !bytes.Contains(p, []byte(`"amount":50`)) {
		t.Errorf("proxy: payload of p-2 is %q (%v)", p, err)
		return nil
	}
	p = bytes.Replace(p, []byte(`"amount":50`), []byte(`"amount":5000`), 1)
	s := base64.StdEncoding.EncodeToString(p)
	e.PayloadBase64 = &s
	return p
}

// permutedEntries serves payments as the list real[perm[0]], real[perm[1]],
// ... renumbered 0, 1, ...: every entry is a genuine one with a leaf that
// recomputes, only the list is not the log.
func permutedEntries(t *testing.T, upstream string, perm []int) func(r *http.Request, body []byte) []byte {
	return func(r *http.Request, body []byte) []byte {
		if !isPaymentsRange(r) {
			return nil
		}
		q := r.URL.Query()
		start, err1 := strconv.Atoi(q.Get("start"))
		end, err2 := strconv.Atoi(q.Get("end"))
		if err1 != nil || err2 != nil {
			t.Errorf("proxy: range %q", r.URL.RawQuery)
			return nil
		}
		resp, err := http.Get(fmt.Sprintf("%s/v1/logs/payments/entries?start=0&end=%d&payload=base64", upstream, len(perm)))
		if err != nil {
			t.Errorf("proxy: %v", err)
			return nil
		}
		defer resp.Body.Close()
		var real struct {
			Entries []client.Entry `json:"entries"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&real); err != nil || len(real.Entries) != len(perm) {
			t.Errorf("proxy: upstream entries: %d, %v", len(real.Entries), err)
			return nil
		}
		var out struct {
			Entries []client.Entry `json:"entries"`
		}
		out.Entries = []client.Entry{}
		for i := start; i < min(end, len(perm)); i++ {
			e := real.Entries[perm[i]]
			e.Index = uint64(i)
			out.Entries = append(out.Entries, e)
		}
		b, _ := json.Marshal(out)
		return b
	}
}

// corruptHashes flips a bit of the first hash of a proof response.
func corruptHashes(t *testing.T, body []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("proxy: proof response: %v", err)
		return nil
	}
	var hs []merkle.Hash
	if err := json.Unmarshal(m["hashes"], &hs); err != nil || len(hs) == 0 {
		t.Errorf("proxy: proof hashes %s: %v", m["hashes"], err)
		return nil
	}
	hs[0][0] ^= 1
	m["hashes"], _ = json.Marshal(hs)
	b, _ := json.Marshal(m)
	return b
}

func TestVerifyLedgerFailures(t *testing.T) {
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})

	// A control: through a proxy that changes nothing, the run is clean.
	if r := runVerifyTest(t, d.remoteArgs(tamperProxy(t, d.url, nil), spec)...); r.code != exitClean {
		t.Fatalf("through an honest proxy: %v", r)
	}

	t.Run("wrong verifier key", func(t *testing.T) {
		// A key of the same name the server does not sign with.
		other := filepath.Join(t.TempDir(), "other.key")
		if err := runKeygen([]string{"-name", "auditd.local", "-out", other}); err != nil {
			t.Fatal(err)
		}
		pub, err := os.ReadFile(other + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		r := runVerifyTest(t, "--config", spec, "--server", d.url, "--verifier-key", strings.TrimSpace(string(pub)))
		checkVerificationFailure(t, r, "checkpoint of payments")
		// It names the key given and the key that signed, as prove does.
		served, _ := os.ReadFile(d.vkeyFile)
		signer, _, _ := strings.Cut(strings.TrimSpace(string(served)), "+")
		if !regexpMatch(`the key given is auditd\.local \(key hash [0-9a-f]{8}\), the checkpoint is signed by `+regexp.QuoteMeta(signer)+` \(key hash [0-9a-f]{8}\)`, r.stdout) {
			t.Errorf("the report does not name the key given and the signer %s; %v", signer, r)
		}
	})

	t.Run("server as host:port", func(t *testing.T) {
		if r := runVerifyTest(t, d.remoteArgs(strings.TrimPrefix(d.url, "http://"), spec)...); r.code != exitClean {
			t.Errorf("--server host:port: %v", r)
		}
	})

	t.Run("forged checkpoint root", func(t *testing.T) {
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if r.URL.Path != "/v1/logs/payments/checkpoint" {
				return nil
			}
			lines := strings.SplitN(string(body), "\n", 4) // origin, size, root, rest
			var forged merkle.Hash
			forged[0] = 1
			lines[2] = forged.String()
			return []byte(strings.Join(lines, "\n"))
		})
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "checkpoint of payments")
	})

	t.Run("payload rewritten", func(t *testing.T) {
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if !isPaymentsRange(r) {
				return nil
			}
			return rewriteEntries(t, body, func(e *client.Entry) { raiseAmount(t, e) })
		})
		url = jsonOnlyProxy(t, url) // verify_remote_test.go: the lie is in the JSON listing
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "leaf bytes from the server differ from the leaf recomputed from its fields")
	})

	t.Run("payload and leaf rewritten", func(t *testing.T) {
		// The leaf and its hash are recomputed to match the new payload:
		// each entry checks out alone, the tree does not.
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if !isPaymentsRange(r) {
				return nil
			}
			return rewriteEntries(t, body, func(e *client.Entry) {
				orig := *e
				p := raiseAmount(t, e)
				if p == nil {
					return
				}
				leaf, _, _, err := orig.Decode("payments")
				if err != nil {
					t.Errorf("proxy: %v", err)
					return
				}
				leaf.PayloadSHA256 = sha256.Sum256(p)
				lb, err := leaf.MarshalBinary()
				if err != nil {
					t.Errorf("proxy: %v", err)
					return
				}
				e.Leaf = base64.StdEncoding.EncodeToString(lb)
				e.LeafHash = merkle.LeafHash(lb)
				e.PayloadSHA256 = base64.StdEncoding.EncodeToString(leaf.PayloadSHA256[:])
			})
		})
		url = jsonOnlyProxy(t, url) // verify_remote_test.go: the lie is in the JSON listing
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entry 1 of payments has leaf hash")
	})

	t.Run("entry dropped", func(t *testing.T) {
		// p-3 (alice -30) withheld; the list keeps its length by repeating
		// the last entry.
		url := tamperProxy(t, d.url, permutedEntries(t, d.url, []int{0, 1, 3, 4, 4}))
		url = jsonOnlyProxy(t, url) // verify_remote_test.go: the lie is in the JSON listing
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entry 2 of payments has leaf hash")
	})

	t.Run("entries reordered", func(t *testing.T) {
		// The same balances, so only the tree can tell.
		url := tamperProxy(t, d.url, permutedEntries(t, d.url, []int{0, 2, 1, 3, 4}))
		url = jsonOnlyProxy(t, url) // verify_remote_test.go: the lie is in the JSON listing
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, spec)...), "entry 1 of payments has leaf hash")
	})

	t.Run("forged consistency proof at a store watermark", func(t *testing.T) {
		// The store says it applied the first 3 entries: the fold stops
		// there and proves that prefix consistent with the checkpoint.
		wm := newVerifyTable(t)
		wm.set(map[string]int64{"alice": 70, "bob": 50})
		wmSpec := writeVerifySpec(t, wm.name, verifySpecOpts{watermarkQuery: "SELECT 'payments', 3::bigint"})
		jsonFile := filepath.Join(t.TempDir(), "r.json")
		r := runVerifyTest(t, d.remoteArgs(d.url, wmSpec, "--json", jsonFile)...)
		if r.code != exitClean {
			t.Fatalf("watermark 3, honest server: %v", r)
		}
		rep := readVerifyJSON(t, jsonFile).Reports[0]
		if rep.Events != 3 || rep.Watermarks["payments"] != 3 || len(rep.Pins) != 1 || rep.Pins[0].Size != 3 {
			t.Errorf("watermark 3: events %d, watermarks %v, pins %+v", rep.Events, rep.Watermarks, rep.Pins)
		}
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if r.URL.Path != "/v1/logs/payments/proof/consistency" {
				return nil
			}
			return corruptHashes(t, body)
		})
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, wmSpec)...), "root of payments at size 3: rederive: ledger verification failed: payments: entries [2, 3) as served make a tree of size 3 that is not a prefix of the signed checkpoint of size 5")
	})

	t.Run("forged inclusion proof in the drift evidence", func(t *testing.T) {
		// Drift, whose lineage proofs are forged: a verification failure
		// outranks the drift.
		drifted := newVerifyTable(t)
		drifted.set(map[string]int64{"alice": 70, "bob": 999, "carol": 7})
		dspec := writeVerifySpec(t, drifted.name, verifySpecOpts{})
		url := tamperProxy(t, d.url, func(r *http.Request, body []byte) []byte {
			if r.URL.Path != "/v1/logs/payments/proof/inclusion" {
				return nil
			}
			return corruptHashes(t, body)
		})
		checkVerificationFailure(t, runVerifyTest(t, d.remoteArgs(url, dspec)...), "not in the checkpoint of size 5")
	})
}

// checkVerificationFailure checks that a run exited 3 and reported a
// verification error containing detail.
func checkVerificationFailure(t *testing.T, r verifyResult, detail string) {
	t.Helper()
	if r.code != exitVerification {
		t.Fatalf("want exit 3; %v", r)
	}
	if !strings.Contains(r.stdout, "error (verification)") || !regexpMatch(`(?m)^balances: verification error: .*ledger verification failed`, r.stdout) {
		t.Errorf("stdout does not report a verification error; %v", r)
	}
	if !strings.Contains(r.stdout, detail) {
		t.Errorf("stdout lacks %q; %v", detail, r)
	}
	if !strings.Contains(r.stderr, "ledger verification failed") {
		t.Errorf("stderr does not mention the verification failure; %v", r)
	}
}

func TestVerifyDataDir(t *testing.T) {
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	dir := t.TempDir()
	run := func(name string, where ...string) *rederive.Report {
		t.Helper()
		jsonFile := filepath.Join(dir, name+".json")
		r := runVerifyTest(t, append(append([]string{"--config", spec}, where...), "--json", jsonFile)...)
		rep := readVerifyJSON(t, jsonFile).Reports[0]
		if want := map[string]int{rederive.StateClean: exitClean, rederive.StateDrift: exitDrift}[rep.State]; r.code != want || rep.State == "" {
			t.Fatalf("%s: state %q; %v", name, rep.State, r)
		}
		return rep
	}
	remote := []string{"--server", d.url, "--verifier-key", "@" + d.vkeyFile}

	tb.set(verifyBalances)
	remoteClean := run("remote-clean", remote...)
	tb.set(map[string]int64{"alice": 70, "bob": 999})
	remoteDrift := run("remote-drift", remote...)

	d.stop() // verify --data-dir opens the ledger itself
	local := []string{"--data-dir", d.dataDir}
	tb.set(verifyBalances)
	localClean := run("local-clean", local...)
	tb.set(map[string]int64{"alice": 70, "bob": 999})
	localDrift := run("local-drift", local...)

	// A run that fails (no log matches the sources) is a JUnit error.
	none := writeVerifySpec(t, tb.name, verifySpecOpts{sources: "[nosuchlog]"})
	junitFile := filepath.Join(dir, "error.xml")
	if r := runVerifyTest(t, "--config", none, "--data-dir", d.dataDir, "--junit", junitFile); r.code != exitError || !strings.Contains(r.stdout, "error (ledger)") {
		t.Errorf("no log matching the sources: %v", r)
	}
	ju := readVerifyJUnit(t, junitFile)
	if ju.Errors != 1 || ju.Failures != 0 || len(ju.Suites) != 1 || len(ju.Suites[0].Cases) != 1 ||
		ju.Suites[0].Cases[0].Error == nil || ju.Suites[0].Cases[0].Error.Type != "ledger" {
		t.Errorf("JUnit of a failed run: %+v", ju)
	}

	// A step that would run for minutes on gigabytes (issue 28's probe)
	// stops at the cost limit: every event fails, naming the setting.
	costly := writeVerifySpec(t, tb.name, verifySpecOpts{step: `"size(lists.range(20000).map(x, lists.range(1000).map(y, y))) + state"`})
	if r := runVerifyTest(t, "--config", costly, "--data-dir", d.dataDir); r.code != exitError ||
		!strings.Contains(r.stdout, "error (derivation)") || !strings.Contains(r.stdout+r.stderr, "cost_limit") {
		t.Errorf("a step past the cost limit: %v", r)
	}

	for _, c := range []struct {
		name          string
		remote, local *rederive.Report
	}{{"clean", remoteClean, localClean}, {"drift", remoteDrift, localDrift}} {
		rr, lr := c.remote, c.local
		if rr.State != lr.State || rr.Events != lr.Events || rr.Keys != lr.Keys || rr.Stats != lr.Stats ||
			rr.Confirmed != lr.Confirmed || rr.Pending != lr.Pending {
			t.Errorf("%s: remote %s events %d keys %d %+v, local %s events %d keys %d %+v", c.name,
				rr.State, rr.Events, rr.Keys, rr.Stats, lr.State, lr.Events, lr.Keys, lr.Stats)
		}
		if !reflect.DeepEqual(rr.Pins, lr.Pins) {
			t.Errorf("%s: pins differ: remote %+v, local %+v", c.name, rr.Pins, lr.Pins)
		}
		if !reflect.DeepEqual(rr.Drift, lr.Drift) {
			t.Errorf("%s: drift differs:\nremote %+v\nlocal  %+v", c.name, rr.Drift, lr.Drift)
		}
	}
	if remoteClean.State != rederive.StateClean || remoteDrift.State != rederive.StateDrift || len(remoteDrift.Drift) != 2 {
		t.Errorf("remote runs: %s, %s with %d drifts", remoteClean.State, remoteDrift.State, len(remoteDrift.Drift))
	}
}

// verifyJUnit is the --junit output as CI systems read it.
type verifyJUnit struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Time     string   `xml:"time,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Errors   int    `xml:"errors,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name    string             `xml:"name,attr"`
			Time    string             `xml:"time,attr"`
			Failure *verifyJUnitDetail `xml:"failure"`
			Error   *verifyJUnitDetail `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type verifyJUnitDetail struct {
	Type    string `xml:"type,attr"`
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// readVerifyJUnit parses a --junit file, checks that every time attribute
// is a plain decimal (JUnit's xs:decimal) and, where xmllint is installed,
// that xmllint finds the file well-formed.
func readVerifyJUnit(t *testing.T, path string) verifyJUnit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ju verifyJUnit
	if err := xml.Unmarshal(b, &ju); err != nil {
		t.Fatalf("--junit output is not XML: %v\n%s", err, b)
	}
	times := []string{ju.Time}
	for _, s := range ju.Suites {
		times = append(times, s.Time)
		for _, c := range s.Cases {
			times = append(times, c.Time)
		}
	}
	for _, tm := range times {
		if !regexpMatch(`^[0-9]+\.[0-9]+$`, tm) {
			t.Errorf("JUnit time %q is not a decimal\n%s", tm, b)
		}
	}
	if xmllint, err := exec.LookPath("xmllint"); err == nil {
		if out, err := exec.Command(xmllint, "--noout", path).CombinedOutput(); err != nil {
			t.Errorf("xmllint --noout %s: %v\n%s", path, err, out)
		}
	} else {
		t.Log("xmllint not installed: JUnit well-formedness checked by encoding/xml only")
	}
	return ju
}

func regexpMatch(re, s string) bool {
	return regexp.MustCompile(re).MatchString(s)
}

// TestVerifyEmptyLog checks that a log matched by the sources but still
// empty (no checkpoint yet) is skipped, remotely as locally.
func TestVerifyEmptyLog(t *testing.T) {
	d := startVerifyDaemon(t, "payments-new")
	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{sources: "[payments*]"})
	if r := runVerifyTest(t, d.remoteArgs(d.url, spec)...); r.code != exitClean || !regexpMatch(`(?m)^balances\s+clean\s+5\s`, r.stdout) {
		t.Errorf("remote: %v", r)
	}
	d.stop()
	if r := runVerifyTest(t, "--config", spec, "--data-dir", d.dataDir); r.code != exitClean || !regexpMatch(`(?m)^balances\s+clean\s+5\s`, r.stdout) {
		t.Errorf("local: %v", r)
	}
}

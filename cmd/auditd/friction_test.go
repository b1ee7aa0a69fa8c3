package main

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
)

// TestServerHostPort: status, alerts and prove take --server as host:port
// (what --listen and the startup line print), as http://host:port; a
// scheme other than http or https is a usage error.
func TestServerHostPort(t *testing.T) {
	srv, vkeyFile := startServe(t)
	post(t, srv+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","payload":{"amount":5}}`)
	hostport := strings.TrimPrefix(srv, "http://")
	var out, errb bytes.Buffer
	if code := runStatus([]string{"--server", hostport}, &out, &errb); code != 0 || !strings.Contains(out.String(), "orders") {
		t.Errorf("status --server %s: exit %d\n%s%s", hostport, code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runAlerts([]string{"--server", hostport + "/"}, &out, &errb); code != 0 {
		t.Errorf("alerts --server %s/: exit %d\n%s%s", hostport, code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runProve([]string{"--server", hostport, "--log", "orders", "--id", "o-1", "--verifier-key-file", vkeyFile}, &out, &errb); code != 0 || !strings.Contains(out.String(), "VERIFIED") {
		t.Errorf("prove --server %s: exit %d\n%s%s", hostport, code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := runStatus([]string{"--server", "ftp://" + hostport}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "host:port") {
		t.Errorf("status --server ftp://...: exit %d, want 2 with a hint\n%s", code, errb.String())
	}
}

// TestServerHostPortTLS: with --ca-file, a bare host:port is https.
func TestServerHostPortTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/logs":
			w.Write([]byte("[]"))
		default: // derivations, checks and alerts off
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":"alerts_disabled","error":"off"}`))
		}
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	var out, errb bytes.Buffer
	if code := runStatus([]string{"--server", srv.Listener.Addr().String(), "--ca-file", ca}, &out, &errb); code != 0 {
		t.Errorf("status --server host:port --ca-file: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestAlertsStateBogus: an unknown --state gets one line naming the value
// and the valid ones (not the other flags), exit 2.
func TestAlertsStateBogus(t *testing.T) {
	var out, errb bytes.Buffer
	code := runAlerts([]string{"--state", "bogus"}, &out, &errb)
	want := "auditd alerts: --state \"bogus\": want firing, resolved or all\n"
	if code != 2 || errb.String() != want {
		t.Errorf("alerts --state bogus: exit %d, stderr %q; want 2, %q", code, errb.String(), want)
	}
}

// TestProveWitnessLine: prove --witness-key says which witness cosigned,
// and when one named did not, which one.
func TestProveWitnessLine(t *testing.T) {
	srv, vkeyFile := startServe(t)
	post(t, srv+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","payload":{"amount":5}}`)
	vkey, err := os.ReadFile(vkeyFile)
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	wskey, wvkey, err := witness.GenerateKey(rand.Reader, "w1.example")
	if err != nil {
		t.Fatal(err)
	}
	w, err := witness.ParseKey(wskey)
	if err != nil {
		t.Fatal(err)
	}
	_, absent, _ := witness.GenerateKey(rand.Reader, "w2.example")
	// A proxy that serves the checkpoints cosigned by w1.
	url := tamperProxy(t, srv, func(r *http.Request, body []byte) []byte {
		if !strings.HasSuffix(r.URL.Path, "/checkpoint") {
			return nil
		}
		n, err := note.Open(body, note.VerifierList(logKey))
		if err != nil {
			t.Errorf("open the checkpoint: %v", err)
			return nil
		}
		b, err := note.Sign(n, w)
		if err != nil {
			t.Errorf("cosign: %v", err)
			return nil
		}
		return b
	})
	prove := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runProve(append([]string{"--server", url, "--log", "orders", "--id", "o-1", "--verifier-key-file", vkeyFile}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := prove("--witness-key", wvkey)
	if code != 0 || !strings.Contains(out, "witnesses   cosigned by w1.example (1 of 1 needed)  OK\n") {
		t.Errorf("prove --witness-key w1: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = prove("--witness-key", absent)
	if code != 1 || !strings.Contains(errs, "no cosignature from the 1 witnesses (w2.example)") {
		t.Errorf("prove --witness-key w2: exit %d, want 1 naming w2.example\n%s%s", code, out, errs)
	}
}

// TestKeygenOutMissingDir: keygen -out in a directory that does not exist
// is refused, and the directory is not made.
func TestKeygenOutMissingDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing", "dir")
	err := runKeygen([]string{"-out", filepath.Join(missing, "k")})
	if err == nil || !strings.Contains(err.Error(), "directory "+missing+" does not exist") {
		t.Errorf("keygen -out %s/k: %v, want a refusal naming the directory", missing, err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Errorf("keygen made %s: %v", filepath.Dir(missing), err)
	}
}

// TestServeBadOriginMakesNothing: an origin that cannot name a key, or a
// derivation spec file that is missing, is refused before the data dir is
// made.
func TestServeBadOriginMakesNothing(t *testing.T) {
	dd := filepath.Join(t.TempDir(), "data")
	err := runServe([]string{"--origin", "bad name", "--data-dir", dd, "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), `origin "bad name"`) {
		t.Errorf("serve --origin 'bad name': %v, want a refusal naming the origin", err)
	}
	if _, err := os.Stat(dd); !os.IsNotExist(err) {
		t.Errorf("serve left %s behind: %v", dd, err)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	err = runServe([]string{"--derivations", missing, "--data-dir", dd, "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("serve --derivations %s: %v, want a refusal naming the file", missing, err)
	}
	if _, err := os.Stat(dd); !os.IsNotExist(err) {
		t.Errorf("serve with a missing spec file left %s behind: %v", dd, err)
	}
}

// TestServePubFileMode: the .pub serve writes beside the key it generates
// is 0644, as keygen's, although serve runs under umask 077.
func TestServePubFileMode(t *testing.T) {
	_, pub := startServe(t)
	fi, err := os.Stat(pub)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("%s from serve: mode %04o, want 0644", pub, fi.Mode().Perm())
	}
}

// TestPruneBeforePastEnd: an index past the end of the log is refused,
// exit 2, naming the log's size, and nothing is pruned; -h and the
// refusal of a derivation's source tell what is true today (serve's
// retention snapshots the derivation; this command does not).
func TestPruneBeforePastEnd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	pruneStore(t, dir, 10)
	code, out, errs := runPruneTest("--data-dir", dir, "--log", "orders", "--before", "11")
	if code != 2 || !strings.Contains(errs, "--before 11 is past the end of log orders, which has 10 entries") || strings.Contains(out, "pruned") {
		t.Errorf("prune --before 11 of 10: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runPruneTest("--data-dir", dir, "--log", "orders", "--before", "10"); code != 0 || !strings.Contains(out, "pruned the payloads of 10 entries") {
		t.Errorf("prune --before 10 of 10: exit %d\n%s%s", code, out, errs)
	}
	_, _, help := runPruneTest("-h")
	if strings.Contains(help, "not implemented") || !strings.Contains(help, "snapshots such a") {
		t.Errorf("prune -h:\n%s", help)
	}
	spec := filepath.Join(t.TempDir(), "d.yaml")
	writeFile(t, spec, "derivations:\n  - name: counts\n    sources: [orders]\n    key: event.id\n    initial: \"0\"\n    step: state + 1\n    store:\n      postgres: {dsn: \"postgres://postgres@127.0.0.1:5432/test?sslmode=disable\", table: t}\n")
	cfg := filepath.Join(t.TempDir(), "auditd.yaml")
	writeFile(t, cfg, "data_dir: "+dir+"\nderivations: ["+spec+"]\n")
	code, _, errs = runPruneTest("--config", cfg, "--log", "orders", "--before", "5")
	if code == 0 || strings.Contains(errs, "not implemented") || !strings.Contains(errs, "retention") {
		t.Errorf("prune of a derivation's source: exit %d\n%s", code, errs)
	}
}

// TestOperatorTextNoGoNames: help and errors an operator reads name flags
// and config keys, not Go identifiers or source files.
func TestOperatorTextNoGoNames(t *testing.T) {
	goName := regexp.MustCompile(`\b[a-z]+\.[A-Z][A-Za-z]+\b|\b[a-z_]+\.go\b`)
	var texts []string
	for name, run := range map[string]func([]string, *bytes.Buffer, *bytes.Buffer) int{
		"verify": func(a []string, o, e *bytes.Buffer) int { return runVerify(a, o, e) },
		"prove":  func(a []string, o, e *bytes.Buffer) int { return runProve(a, o, e) },
		"prune":  func(a []string, o, e *bytes.Buffer) int { return runPrune(a, o, e) },
		"status": func(a []string, o, e *bytes.Buffer) int { return runStatus(a, o, e) },
		"alerts": func(a []string, o, e *bytes.Buffer) int { return runAlerts(a, o, e) },
	} {
		var out, errb bytes.Buffer
		run([]string{"-h"}, &out, &errb)
		texts = append(texts, name+" -h: "+out.String()+errb.String())
	}
	rb := &ledger.RollbackError{Dir: "/d/checkpoints", Logs: []*ledger.IntegrityError{{Log: "orders", Detail: "behind"}}}
	texts = append(texts, "rollback refusal: "+rb.Error())
	for _, s := range texts {
		if m := goName.FindAllString(s, -1); len(m) > 0 {
			t.Errorf("Go names %q in %s", m, s)
		}
	}
	if !strings.Contains(rb.Error(), "rollback_read_only") {
		t.Errorf("the rollback refusal does not name the config key: %s", rb.Error())
	}
}

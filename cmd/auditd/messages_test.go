package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConfigErrorsNameYAMLFields: a misspelt field is reported with the
// file, its line, the YAML section and the closest known field, not a Go
// type.
func TestConfigErrorsNameYAMLFields(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ yaml, want string }{
		{"listen: 127.0.0.1:1\nlistn: x\n", `auditd.yaml:2: unknown field "listn" at the top level (did you mean "listen"?)`},
		{"kafka:\n  brokers: [a:1]\n  topcs: [t]\n", `auditd.yaml:3: unknown field "topcs" under kafka (did you mean "topics"?)`},
		{"checks:\n  scrub_intervall: 1h\n", `auditd.yaml:2: unknown field "scrub_intervall" under checks (did you mean "scrub_interval"?)`},
	} {
		p := filepath.Join(dir, "auditd.yaml")
		writeFile(t, p, tc.yaml)
		_, err := loadConfig(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "main.") || strings.Contains(err.Error(), "type ") {
			t.Errorf("%q: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}

// TestVerifierKeyForms: prove and verify take the key as itself, @FILE or
// --verifier-key-file, and prove with the wrong key says who signed.
func TestVerifierKeyForms(t *testing.T) {
	url, keyFile := startServe(t)
	post(t, url+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","payload":{"amount":5}}`)
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--verifier-key", strings.TrimSpace(string(key))},
		{"--verifier-key", "@" + keyFile},
		{"--verifier-key-file", keyFile},
	} {
		var out, errb bytes.Buffer
		if code := runProve(append([]string{"--server", url, "--log", "orders", "--id", "o-1"}, args...), &out, &errb); code != 0 {
			t.Errorf("prove %v: exit %d: %s", args[0:1], code, errb.String())
		}
	}
	name, _, _ := strings.Cut(strings.TrimSpace(string(key)), "+") // the daemon's key name (a unique default origin)
	other := filepath.Join(t.TempDir(), "other.key")
	if err := writeNewKey(other, name); err != nil { // the same name, another key
		t.Fatal(err)
	}
	k, _, err := loadOrCreateKey(other, name)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runProve([]string{"--server", url, "--log", "orders", "--id", "o-1", "--verifier-key", k.vkey}, &out, &errb)
	t.Logf("prove with another key: %s", errb.String())
	if code != 1 || !strings.Contains(errb.String(), "signed by "+name+" (key hash ") {
		t.Errorf("prove with another key: exit %d: %s", code, errb.String())
	}
}

// TestVerifyHelpAndDaemonConfig: verify -h shows --config with a plain
// argument name (no "-config derivations:" from back-quotes); verify
// accepts the daemon's config file and checks the derivations it names,
// with the key as --verifier-key-file.
func TestVerifyHelpAndDaemonConfig(t *testing.T) {
	var out, errb bytes.Buffer
	runVerify([]string{"-h"}, &out, &errb)
	if h := errb.String(); strings.Contains(h, "-config derivations") || !regexpMatch(`(?m)^\s+-config string$`, h) {
		t.Errorf("verify -h:\n%s", h)
	}
	d := startVerifyDaemon(t)
	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	conf := filepath.Join(t.TempDir(), "auditd.yaml")
	writeFile(t, conf, "listen: 127.0.0.1:0\nderivations: ["+spec+"]\n")
	r := runVerifyTest(t, "--config", conf, "--server", d.url, "--verifier-key-file", d.vkeyFile)
	if r.code != exitClean || !strings.Contains(r.stdout, "balances") {
		t.Errorf("verify --config <daemon config>: %v", r)
	}
}

// TestDemoBannerKcatHasID: the kcat line the demo's banner suggests sends
// an id header, and the banner's lookup by id asks for that id, so the
// suggested lookup finds the suggested record.
func TestDemoBannerKcatHasID(t *testing.T) {
	b := demoBanner("127.0.0.1:9092", "127.0.0.1:8080", "./auditd-demo")
	m := regexp.MustCompile(`\| kcat -P .* -H id=(\S+)`).FindStringSubmatch(b)
	if m == nil {
		t.Fatalf("the banner's kcat example sends no id header:\n%s", b)
	}
	if !strings.Contains(b, "entries?id="+m[1]) {
		t.Errorf("the banner does not look up the id %s it produces:\n%s", m[1], b)
	}
}

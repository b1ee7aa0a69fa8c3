package main

import (
	"bytes"
	"os"
	"path/filepath"
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
	other := filepath.Join(t.TempDir(), "other.key")
	if err := writeNewKey(other, "auditd.local"); err != nil { // the same name, another key
		t.Fatal(err)
	}
	k, _, err := loadOrCreateKey(other, "auditd.local")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runProve([]string{"--server", url, "--log", "orders", "--id", "o-1", "--verifier-key", k.vkey}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "signed by auditd.local (key hash ") {
		t.Errorf("prove with another key: exit %d: %s", code, errb.String())
	}
}

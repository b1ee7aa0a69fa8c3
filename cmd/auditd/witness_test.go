package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/witness"
)

// TestDefaultOriginUnique: two fresh data dirs get different origins
// (host name and key hash), each stable across restarts; an existing key
// keeps its name (auditd.local before this change); an explicit origin
// that is not the key's is refused rather than ignored.
func TestDefaultOriginUnique(t *testing.T) {
	a, b := filepath.Join(t.TempDir(), "auditd.key"), filepath.Join(t.TempDir(), "auditd.key")
	ka, _, err := loadOrCreateKey(a, defaultConfig().Origin)
	if err != nil {
		t.Fatal(err)
	}
	kb, _, err := loadOrCreateKey(b, defaultConfig().Origin)
	if err != nil {
		t.Fatal(err)
	}
	if ka.signer.Name() == kb.signer.Name() {
		t.Fatalf("two data dirs share the origin %q", ka.signer.Name())
	}
	if !regexp.MustCompile(`^[a-z0-9.-]+-[0-9a-f]{8}$`).MatchString(ka.signer.Name()) {
		t.Errorf("default origin %q is not HOST-KEYHASH", ka.signer.Name())
	}
	again, created, err := loadOrCreateKey(a, defaultConfig().Origin)
	if err != nil || created || again.signer.Name() != ka.signer.Name() {
		t.Errorf("restart: origin %q (created %v, %v), want %q", again.signer.Name(), created, err, ka.signer.Name())
	}
	old := filepath.Join(t.TempDir(), "auditd.key")
	if err := writeNewKey(old, "auditd.local"); err != nil {
		t.Fatal(err)
	}
	if k, _, err := loadOrCreateKey(old, defaultConfig().Origin); err != nil || k.signer.Name() != "auditd.local" {
		t.Errorf("existing key: origin %v, %v; want auditd.local kept", k, err)
	}
	if _, _, err := loadOrCreateKey(old, "other.example"); err == nil || !strings.Contains(err.Error(), "auditd.local") {
		t.Errorf("explicit origin other than the key's: %v, want a refusal naming the key's", err)
	}
	if k, _, err := loadOrCreateKey(filepath.Join(t.TempDir(), "k"), "chosen.example"); err != nil || k.signer.Name() != "chosen.example" {
		t.Errorf("explicit origin for a new key: %v, %v", k, err)
	}
	if got := uniqueKeyName("My_Host.Example", make([]byte, 32)); got != "my-host.example-66687aad" {
		t.Errorf("uniqueKeyName = %q", got)
	}
}

type daemonHandle struct {
	url  string
	stop func()
}

func startWith(t *testing.T, cfg Config) daemonHandle {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	select {
	case addr := <-ready:
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve returned %v", err)
				}
			}
		}
		t.Cleanup(stop)
		return daemonHandle{url: "http://" + addr, stop: stop}
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	return daemonHandle{}
}

type witnessInstance struct {
	cfg              Config
	name, vkey, wkey string // checkpoint key name, its verifier key, witness verifier key
}

func newWitnessInstance(t *testing.T) *witnessInstance {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.KeyFile = filepath.Join(cfg.DataDir, "auditd.key")
	k, _, err := loadOrCreateKey(cfg.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	w, err := loadOrCreateWitnessKey(filepath.Join(cfg.DataDir, "witness.key"), k.signer.Name()+"/witness")
	if err != nil {
		t.Fatal(err)
	}
	return &witnessInstance{cfg: cfg, name: k.signer.Name(), vkey: k.vkey, wkey: w.VerifierKey()}
}

// waitCosigned fetches log's checkpoint from url until it carries a
// cosignature by wkey.
func waitCosigned(t *testing.T, url, log, wkey string) []byte {
	t.Helper()
	p, err := witness.NewPolicy(1, wkey)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/v1/logs/" + log + "/checkpoint")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if _, err := p.Check(b); err == nil {
			return b
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: checkpoint of %s never cosigned by %s: %v\n%s", url, log, wkey, err, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoDaemonsWitnessEachOther: two auditd instances, each the other's
// witness. Each serves its checkpoints with the other's cosignature,
// prove accepts them under a policy naming the other and refuses them
// under one naming a witness that did not cosign, and the log status
// reports the witness.
func TestTwoDaemonsWitnessEachOther(t *testing.T) {
	a, b := newWitnessInstance(t), newWitnessInstance(t)
	b.cfg.Witness.Logs = []WitnessedLog{{Origin: a.name + "/payments", VerifierKey: a.vkey}}
	bd := startWith(t, b.cfg)
	a.cfg.Witness.Logs = []WitnessedLog{{Origin: b.name + "/orders", VerifierKey: b.vkey}}
	a.cfg.Witness.Witnesses = []WitnessEndpoint{{URL: bd.url, VerifierKey: b.wkey}}
	ad := startWith(t, a.cfg)
	// B again, now also submitting to A (its witness state is kept).
	bd.stop()
	b.cfg.Listen = strings.TrimPrefix(bd.url, "http://")
	b.cfg.Witness.Witnesses = []WitnessEndpoint{{URL: ad.url, VerifierKey: a.wkey}}
	bd = startWith(t, b.cfg)

	post(t, ad.url+"/v1/logs/payments/entries?wait=checkpoint", `{"id":"p-1","payload":1}
{"id":"p-2","payload":2}`)
	post(t, bd.url+"/v1/logs/orders/entries?wait=checkpoint", `{"id":"o-1","payload":1}`)
	waitCosigned(t, ad.url, "payments", b.wkey)
	waitCosigned(t, bd.url, "orders", a.wkey)

	prove := func(url, log, vkey string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runProve(append([]string{"-server", url, "-log", log, "-index", "0", "-verifier-key", vkey}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := prove(ad.url, "payments", a.vkey, "--witness-key", b.wkey); code != 0 || !strings.Contains(out, "VERIFIED") {
		t.Errorf("prove A's log with B as witness: exit %d\n%s", code, out)
	}
	if code, out := prove(bd.url, "orders", b.vkey, "--witness-key", a.wkey, "--witness-threshold", "1"); code != 0 {
		t.Errorf("prove B's log with A as witness: exit %d\n%s", code, out)
	}
	_, stranger, _ := witness.GenerateKey(rand.Reader, "stranger.example")
	if code, out := prove(ad.url, "payments", a.vkey, "--witness-key", b.wkey, "--witness-key", stranger); code != 1 || !strings.Contains(out, "policy not met") {
		t.Errorf("prove with a policy of 2 (one never cosigned): exit %d, want 1\n%s", code, out)
	}
	if code, out := prove(ad.url, "payments", a.vkey, "--witness-key", stranger, "--witness-threshold", "1"); code != 1 {
		t.Errorf("prove with a policy of a stranger: exit %d, want 1\n%s", code, out)
	}

	resp, err := http.Get(ad.url + "/v1/logs/payments")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Witnesses []struct {
			Witness      string  `json:"witness"`
			CosignedSize *uint64 `json:"cosigned_size"`
			Lag          uint64  `json:"lag"`
		} `json:"witnesses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	if len(info.Witnesses) != 1 || info.Witnesses[0].Witness != b.name+"/witness" || info.Witnesses[0].CosignedSize == nil || *info.Witnesses[0].CosignedSize != 2 || info.Witnesses[0].Lag != 0 {
		t.Errorf("GET /v1/logs/payments witnesses = %+v", info.Witnesses)
	}
}

// TestWitnessPolicyFlags: the policy flags parse into a client option,
// refuse a threshold without keys or above their number, and are refused
// by verify without --server (a data dir holds no cosignatures).
func TestWitnessPolicyFlags(t *testing.T) {
	_, k1, _ := witness.GenerateKey(rand.Reader, "w1.example")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w2.pub"), []byte(k1+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-witness-key", k1}, true},
		{[]string{"-witness-key", "@" + filepath.Join(dir, "w2.pub"), "-witness-threshold", "1"}, true},
		{[]string{"-witness-threshold", "1"}, false},
		{[]string{"-witness-key", k1, "-witness-threshold", "2"}, false},
		{[]string{"-witness-key", "not+a+key"}, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f witnessPolicyFlags
		bindWitnessPolicyFlags(fs, &f)
		err := fs.Parse(tc.args)
		var opts []client.Option
		if err == nil {
			opts, err = f.options()
		}
		if tc.ok != (err == nil && len(opts) == 1) {
			t.Errorf("%v: options %d, %v", tc.args, len(opts), err)
		}
	}
	var vf verifyFlags
	vf.dataDir = t.TempDir()
	vf.wp.keys = []string{k1}
	if _, _, err := verifyLedger(vf, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Errorf("verify --data-dir --witness-key: %v, want a refusal", err)
	}
}

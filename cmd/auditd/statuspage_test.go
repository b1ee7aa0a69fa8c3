package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// TestStatusPageBrowser drives the status page in Debian's Chromium with
// playwright-core (web/e2e/page.test.mjs): the page asks for the read
// token and loads; an honest entry verifies in the browser, each of the
// seven steps passing; another key of the same name fails the signature
// step, which names the key that did sign; the
// same entry through a tampering proxy (payload changed, payload_sha256,
// leaf and leaf_hash recomputed to match) fails at the inclusion proof;
// a drift alert appears without a reload once the test makes the
// PostgreSQL table wrong. Screenshots go to a temporary directory, kept
// when the test fails (with failure.png, the page as it was), or to
// docs/images with AUDITD_UPDATE_SCREENSHOTS=1.
func TestStatusPageBrowser(t *testing.T) {
	e2e, err := filepath.Abs("../../web/e2e")
	if err != nil {
		t.Fatal(err)
	}
	chromium, node := os.Getenv("CHROMIUM"), ""
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	var missing []string
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, "chromium ("+chromium+", apt-get install chromium)")
	}
	if node, err = exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(e2e, "node_modules", "playwright-core")); err != nil {
		missing = append(missing, "playwright-core (npm ci in web/e2e)")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the browser test cannot run: missing %s (.ci/run installs them)", strings.Join(missing, ", "))
		}
		t.Skipf("missing %s; CI runs this test", strings.Join(missing, ", "))
	}
	if testing.Short() {
		t.Skip("starts Chromium (-short)")
	}

	tb := newVerifyTable(t)
	tb.set(verifyBalances)
	spec := writeVerifySpec(t, tb.name, verifySpecOpts{})
	b, _ := os.ReadFile(spec)
	writeFile(t, spec, strings.Replace(string(b), "    grace: 0s\n", "    grace: 0s\n    confirm_runs: 1\n    interval: 100ms\n", 1))
	const token = "page-read-token"
	cfg := defaultConfig()
	cfg.DataDir, cfg.Listen, cfg.ReadToken = t.TempDir(), "127.0.0.1:0", token
	cfg.CheckpointInterval = 10 * time.Millisecond
	cfg.HistoryInterval = 200 * time.Millisecond
	cfg.Derivations = []string{spec}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + addr
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/logs/payments/entries?wait=checkpoint", strings.NewReader(strings.Join(verifyEvents, "\n")))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %s", resp.Status)
	}
	vkey, err := os.ReadFile(cfg.KeyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}

	// Another key of the same name: it parses, and the signature step
	// must refuse it.
	_, otherKey, err := note.GenerateKey(rand.Reader, strings.SplitN(string(vkey), "+", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	tamper := httptest.NewServer(tamperEntries(t, base))
	t.Cleanup(tamper.Close)
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/drift" {
			tb.set(map[string]int64{"alice": 70, "bob": 74, "carol": 7})
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(control.Close)

	// Not t.TempDir: a failing run's screenshots must outlive the test.
	shots, err := os.MkdirTemp("", "auditd-statuspage-")
	if err != nil {
		t.Fatal(err)
	}
	tmp := shots
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(tmp)
		}
	})
	if os.Getenv("AUDITD_UPDATE_SCREENSHOTS") == "1" {
		shots, _ = filepath.Abs("../../docs/images")
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer tcancel()
	cmd := exec.CommandContext(tctx, node, "page.test.mjs")
	cmd.Dir = e2e
	cmd.Env = append(os.Environ(), "AUDITD_URL="+base, "AUDITD_TAMPER_URL="+tamper.URL, "AUDITD_TOKEN="+token,
		"AUDITD_VKEY="+strings.TrimSpace(string(vkey)), "AUDITD_OTHER_VKEY="+otherKey, "AUDITD_LOG=payments", "AUDITD_ENTRY=p-2",
		"AUDITD_CONTROL_URL="+control.URL, "AUDITD_SCREENSHOTS="+shots, "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("page.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed (%v); screenshots in %s", err, shots)
	}
	for _, n := range []string{"status-page", "status-page-verified", "status-page-tampered", "status-page-alert", "status-page-charts", "status-page-drift", "status-page-600px"} {
		if _, err := os.Stat(filepath.Join(shots, n+".png")); err != nil {
			t.Errorf("screenshot %s: %v", n, err)
		}
	}
}

// tamperEntries is a reverse proxy to upstream that serves every entry of
// log payments with a changed payload (amount + 1000) and its
// payload_sha256, leaf and leaf_hash recomputed to match: the lie an
// attacker in the middle would tell, which only the inclusion proof to the
// signed root exposes.
func tamperEntries(t *testing.T, upstream string) http.Handler {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.Path, "/v1/logs/payments/entries") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var e map[string]any
		if err := json.Unmarshal(body, &e); err == nil && e["payload_base64"] != nil {
			body = tamperEntry(t, e)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	return p
}

func tamperEntry(t *testing.T, e map[string]any) []byte {
	payload, _ := base64.StdEncoding.DecodeString(e["payload_base64"].(string))
	var pl map[string]any
	if err := json.Unmarshal(payload, &pl); err != nil {
		t.Errorf("tamper: payload %s: %v", payload, err)
		return nil
	}
	pl["amount"] = pl["amount"].(float64) + 1000
	payload, _ = json.Marshal(pl)
	leafBytes, _ := base64.StdEncoding.DecodeString(e["leaf"].(string))
	var leaf merkle.Leaf
	if err := leaf.UnmarshalBinary(leafBytes); err != nil {
		t.Errorf("tamper: leaf: %v", err)
		return nil
	}
	leaf.PayloadSHA256 = merkle.Hash(sha256.Sum256(payload))
	leafBytes, err := leaf.MarshalBinary()
	if err != nil {
		t.Errorf("tamper: %v", err)
		return nil
	}
	lh := merkle.LeafHash(leafBytes)
	e["payload_base64"] = base64.StdEncoding.EncodeToString(payload)
	e["payload_sha256"] = base64.StdEncoding.EncodeToString(leaf.PayloadSHA256[:])
	e["leaf"] = base64.StdEncoding.EncodeToString(leafBytes)
	e["leaf_hash"] = base64.StdEncoding.EncodeToString(lh[:])
	b, _ := json.Marshal(e)
	return b
}

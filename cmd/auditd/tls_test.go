package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/testca"
	"github.com/auditd/auditd/witness"
)

// TestTLSStartRefusals: serve refuses a TLS configuration it cannot serve
// before it binds or writes anything, saying what is wrong.
func TestTLSStartRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	cert, key := ca.Server(t).Write(t, dir, "a")
	_, otherKey := ca.Server(t).Write(t, dir, "b")
	for _, tc := range []struct {
		name          string
		cert, key, ca string
		want          string
	}{
		{"key of another certificate", cert, otherKey, "", "private key does not match public key"},
		{"missing certificate file", filepath.Join(dir, "nope.crt"), key, "", "nope.crt: no such file or directory"},
		{"certificate without key", cert, "", "", "tls_cert_file is set but tls_key_file is not"},
		{"key without certificate", "", key, "", "tls_key_file is set but tls_cert_file is not"},
		{"client CA without certificate", "", "", filepath.Join(dir, "ca.pem"), "tls_client_ca_file needs tls_cert_file"},
		{"missing client CA file", cert, key, filepath.Join(dir, "nope-ca.pem"), "nope-ca.pem: no such file"},
		{"client CA file that is a key", cert, key, key, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.Listen = "127.0.0.1:0"
			cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = tc.cert, tc.key, tc.ca
			err := cfg.validate()
			if err == nil {
				err = serve(t.Context(), cfg, slog.New(slog.DiscardHandler), nil)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if _, serr := os.Stat(cfg.DataDir); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("the data dir was created (%v)", serr)
			}
		})
	}
}

// TestTLSPeerAndWitnessConfig: the peers' and witnesses' TLS files are
// read at start and refused with their place in the configuration.
func TestTLSPeerAndWitnessConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	cert, key := ca.Client(t, "me").Write(t, dir, "me")
	vkey := ledgerKeyForTest(t)
	cfg := defaultConfig()
	cfg.Checks.Peers.List = []PeerConfig{{URL: "https://peer.example:8443", Key: vkey, TLSCAFile: ca.WriteCA(t, dir, "ca.pem"),
		TLSClientCertFile: cert, TLSClientKeyFile: key}}
	ps, err := cfg.Checks.Peers.peers(nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc := ps[0].TLS; tc == nil || tc.RootCAs == nil || tc.GetClientCertificate == nil || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("peer TLS config %+v: want the CA, the client certificate and TLS 1.2 at least", tc)
	}
	cfg.Checks.Peers.List[0].TLSClientKeyFile = ""
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "checks.peers.list[0] (https://peer.example:8443)") || !strings.Contains(err.Error(), "give both or neither") {
		t.Errorf("peer with a client certificate and no key: %v", err)
	}

	_, wkey, err := witness.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	cfg = defaultConfig()
	cfg.Witness.Witnesses = []WitnessEndpoint{{URL: "https://witness.example", VerifierKey: wkey, TLSCAFile: filepath.Join(dir, "nope.pem")}}
	_, lkey, err := note.GenerateKey(rand.Reader, "log.example")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = newSubmitter(nil, cfg, &signingKey{vkey: lkey}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "witness.witnesses[0] (https://witness.example)") || !strings.Contains(err.Error(), "nope.pem") {
		t.Errorf("witness with a missing CA file: %v", err)
	}
}

// ledgerKeyForTest is a fresh signed-note verifier key.
func ledgerKeyForTest(t *testing.T) string {
	t.Helper()
	_, vkey, err := note.GenerateKey(rand.Reader, "tls-test.example")
	if err != nil {
		t.Fatal(err)
	}
	return vkey
}

var httpsServingAddr = regexp.MustCompile(`msg="auditd serving".* addr=(https://127\.0\.0\.1:[0-9]+)`)

// TestTLSServeBinary runs the auditd binary serving HTTPS with client
// certificates required, and its prove and status commands against it;
// then rotates the certificate with SIGHUP while it serves, and refuses a
// broken one, keeping the previous.
func TestTLSServeBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bin := buildDaemon(t, ctx)
	dir := t.TempDir()
	serverCA, clientCA := testca.New(t, "server CA"), testca.New(t, "client CA")
	first := serverCA.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	caFile := serverCA.WriteCA(t, dir, "server-ca.pem")
	clientCAFile := clientCA.WriteCA(t, dir, "client-ca.pem")
	client := clientCA.Client(t, "ci")
	clientCert, clientKey := client.Write(t, dir, "client")
	dataDir := filepath.Join(dir, "data")

	cmd := exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--checkpoint-interval", "20ms",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-client-ca-file", clientCAFile)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &lineBuffer{}
	addr := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.add(sc.Text())
			if m := httpsServingAddr.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	})
	var url string
	select {
	case url = <-addr:
	case <-exited:
		t.Fatalf("exited before serving:\n%s", strings.Join(logs.lines(), "\n"))
	case <-ctx.Done():
		t.Fatal("not serving")
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{client.TLS(t)}}}}
	resp, err := hc.Post(url+"/v1/logs/orders/entries?wait=checkpoint", "application/x-ndjson",
		strings.NewReader(`{"id":"order-1","payload":{"total":42}}`+"\n"+`{"id":"order-2","payload":{"total":7}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST over TLS: %s %s", resp.Status, body)
	}

	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		var out, errb bytes.Buffer
		c := exec.CommandContext(ctx, bin, args...)
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errb.String()
	}
	tlsArgs := []string{"--ca-file", caFile, "--tls-client-cert", clientCert, "--tls-client-key", clientKey}
	proveArgs := []string{"prove", "--server", url, "--log", "orders", "--id", "order-2", "--verifier-key-file", filepath.Join(dataDir, "auditd.key.pub")}
	if code, out, errs := run(append(proveArgs, tlsArgs...)...); code != 0 || !strings.Contains(out, "VERIFIED") {
		t.Errorf("prove over TLS: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := run(append([]string{"status", "--server", url}, tlsArgs...)...); code != 0 || !strings.Contains(out, "orders") {
		t.Errorf("status over TLS: exit %d\n%s%s", code, out, errs)
	}
	// Without the CA: refused, saying how to trust it; without a client
	// certificate: refused, saying the server wants one.
	if code, _, errs := run("status", "--server", url); code != 1 || !strings.Contains(errs, "certificate signed by unknown authority") || !strings.Contains(errs, "--ca-file") {
		t.Errorf("status without the CA: exit %d, stderr %s", code, errs)
	}
	if code, _, errs := run(append(proveArgs, "--ca-file", caFile)...); code != 2 || !strings.Contains(errs, "--tls-client-cert") {
		t.Errorf("prove without a client certificate: exit %d, stderr %s", code, errs)
	}

	serial := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: serverCA.Pool(),
			Certificates: []tls.Certificate{client.TLS(t)}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	waitLog := func(what string, n int) {
		t.Helper()
		for {
			count := 0
			for _, l := range logs.lines() {
				if strings.Contains(l, what) {
					count++
				}
			}
			if count >= n {
				return
			}
			select {
			case <-exited:
				t.Fatalf("serve exited waiting for %q:\n%s", what, strings.Join(logs.lines(), "\n"))
			case <-ctx.Done():
				t.Fatalf("no log line %q:\n%s", what, strings.Join(logs.lines(), "\n"))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if s := serial(); s != first.Cert.SerialNumber.String() {
		t.Fatalf("serving serial %s, want %s", s, first.Cert.SerialNumber)
	}
	second := serverCA.Server(t)
	second.WriteTo(t, certFile, keyFile)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("why=reload", 1)
	if s := serial(); s != second.Cert.SerialNumber.String() {
		t.Errorf("after SIGHUP: serving serial %s, want the new %s", s, second.Cert.SerialNumber)
	}
	// A broken certificate is refused; the previous one keeps serving.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("previous one stays in use", 1)
	if s := serial(); s != second.Cert.SerialNumber.String() {
		t.Errorf("after a broken certificate: serving serial %s, want the previous %s", s, second.Cert.SerialNumber)
	}
	resp, err = hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^auditd_tls_certificate_reloads_total\{result="error"\} [1-9]`).Match(metrics) {
		t.Errorf("/metrics does not count the refused certificate:\n%s", grepLines(string(metrics), "auditd_tls_"))
	}
	select {
	case <-exited:
		t.Fatalf("serve exited:\n%s", strings.Join(logs.lines(), "\n"))
	default:
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

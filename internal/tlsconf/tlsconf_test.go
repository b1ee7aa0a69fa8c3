package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/auditd/auditd/internal/testca"
)

// serveTLS serves a handler answering "ok" over TLS with cfg on loopback
// and returns its https URL.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ErrorLog: nil}
	go hs.Serve(tls.NewListener(ln, cfg))
	t.Cleanup(func() { hs.Close() })
	return "https://" + ln.Addr().String()
}

// logBuffer collects log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// peerSerial connects to url with a fresh connection trusting ca and
// returns the serial number of the certificate the server presented.
func peerSerial(t *testing.T, url string, ca *testca.CA) string {
	t.Helper()
	c, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// counter is the value of tls_certificate_reloads_total{result}.
func counter(t *testing.T, s *Server, result string) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.reloads.WithLabelValues(result).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func get(url string, tc *tls.Config) (string, error) {
	cl := &http.Client{Transport: Transport(tc)}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestServerServesConfiguredCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	pair := ca.Server(t)
	cert, key := pair.Write(t, dir, "server")
	s, err := NewServer(ServerFiles{CertFile: cert, KeyFile: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s.Config())
	if got := peerSerial(t, url, ca); got != pair.Cert.SerialNumber.String() {
		t.Errorf("served serial %s, want %s", got, pair.Cert.SerialNumber)
	}

	// A client given the CA file reads; one without it is refused with
	// the reason.
	tc, err := ClientFiles{CAFile: ca.WriteCA(t, dir, "ca.pem")}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(url, tc); err != nil || body != "ok" {
		t.Errorf("client trusting the CA: %q, %v", body, err)
	}
	_, err = get(url, nil)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("client not trusting the CA: err %v, want x509.UnknownAuthorityError", err)
	}

	// TLS 1.1 is refused.
	c, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11})
	if err == nil {
		c.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

func TestServerReloadsChangedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	var logs logBuffer
	s, err := NewServer(ServerFiles{CertFile: cert, KeyFile: key}, slog.New(slog.NewTextHandler(&logs, nil)), WithPollInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s.Config())
	if got := peerSerial(t, url, ca); got != first.Cert.SerialNumber.String() {
		t.Fatalf("served serial %s, want %s", got, first.Cert.SerialNumber)
	}
	second := ca.Server(t)
	second.WriteTo(t, cert, key)
	if got := peerSerial(t, url, ca); got != second.Cert.SerialNumber.String() {
		t.Errorf("after rotation: served serial %s, want the new %s", got, second.Cert.SerialNumber)
	}
	if n := counter(t, s, "ok"); n != 1 {
		t.Errorf("reloads ok = %v, want 1", n)
	}

	// A broken pair (the next certificate with the previous key) keeps the
	// current one, logs why and counts it.
	third := ca.Server(t)
	if err := os.WriteFile(cert, third.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := peerSerial(t, url, ca); got != second.Cert.SerialNumber.String() {
		t.Errorf("after a mismatched key: served serial %s, want the previous %s", got, second.Cert.SerialNumber)
	}
	if n := counter(t, s, "error"); n != 1 {
		t.Errorf("reloads error = %v, want 1", n)
	}
	if l := logs.String(); !strings.Contains(l, "previous one stays in use") || !strings.Contains(l, "private key does not match public key") {
		t.Errorf("log does not say the new certificate was refused and why:\n%s", l)
	}
	// Garbage is refused too, and so is a Reload (SIGHUP) of it.
	if err := os.WriteFile(cert, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Error("Reload of a garbage certificate succeeded")
	}
	if got := peerSerial(t, url, ca); got != second.Cert.SerialNumber.String() {
		t.Errorf("after garbage: served serial %s, want the previous %s", got, second.Cert.SerialNumber)
	}
	// Once both files are right, it is served.
	third.WriteTo(t, cert, key)
	if got := peerSerial(t, url, ca); got != third.Cert.SerialNumber.String() {
		t.Errorf("after the fix: served serial %s, want %s", got, third.Cert.SerialNumber)
	}
}

func TestServerReloadNow(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	s, err := NewServer(ServerFiles{CertFile: cert, KeyFile: key}, nil, WithPollInterval(1<<62)) // no polling
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s.Config())
	second := ca.Server(t)
	second.WriteTo(t, cert, key)
	if got := peerSerial(t, url, ca); got != first.Cert.SerialNumber.String() {
		t.Fatalf("before Reload (no polling): served serial %s, want %s", got, first.Cert.SerialNumber)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := peerSerial(t, url, ca); got != second.Cert.SerialNumber.String() {
		t.Errorf("after Reload: served serial %s, want %s", got, second.Cert.SerialNumber)
	}
}

func TestClientCertificateRequired(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "server CA")
	clientCA := testca.New(t, "client CA")
	other := testca.New(t, "other CA")
	cert, key := ca.Server(t).Write(t, dir, "server")
	s, err := NewServer(ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: clientCA.WriteCA(t, dir, "clients.pem")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, s.Config())
	caFile := ca.WriteCA(t, dir, "ca.pem")
	for _, tc := range []struct {
		name string
		pair *testca.Pair
		ok   bool
	}{
		{"no client certificate", nil, false},
		{"certificate of another CA", &[]testca.Pair{other.Client(t, "mallory")}[0], false},
		{"certificate of the client CA", &[]testca.Pair{clientCA.Client(t, "alice")}[0], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := ClientFiles{CAFile: caFile}
			if tc.pair != nil {
				files.CertFile, files.KeyFile = tc.pair.Write(t, t.TempDir(), "client")
			}
			cfg, err := files.Config()
			if err != nil {
				t.Fatal(err)
			}
			body, err := get(url, cfg)
			if tc.ok && (err != nil || body != "ok") {
				t.Errorf("refused: %q, %v", body, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("accepted: %q", body)
			}
		})
	}
}

func TestStartRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, "test CA")
	cert, key := ca.Server(t).Write(t, dir, "a")
	_, otherKey := ca.Server(t).Write(t, dir, "b")
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, nil, 0o600)
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files ServerFiles
		want  string
	}{
		{"key of another certificate", ServerFiles{CertFile: cert, KeyFile: otherKey}, "private key does not match public key"},
		{"missing certificate", ServerFiles{CertFile: filepath.Join(dir, "nope.crt"), KeyFile: key}, "nope.crt: no such file"},
		{"certificate only", ServerFiles{CertFile: cert}, "give both or neither"},
		{"key only", ServerFiles{KeyFile: key}, "give both or neither"},
		{"empty client CA file", ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: empty}, "holds no PEM certificate"},
		{"missing client CA file", ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: filepath.Join(dir, "nope.pem")}, "no such file"},
		// Not small regular files: refused at once, never read without end
		// or waited on (before, /dev/zero was read until memory ran out).
		{"key file /dev/zero", ServerFiles{CertFile: cert, KeyFile: "/dev/zero"}, "key file /dev/zero is not a regular file"},
		{"certificate file a FIFO", ServerFiles{CertFile: fifo, KeyFile: key}, "is not a regular file"},
		{"client CA file /dev/zero", ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: "/dev/zero"}, "is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewServer(tc.files, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		files ClientFiles
		want  string
	}{
		{"empty CA file", ClientFiles{CAFile: empty}, "holds no PEM certificate"},
		{"client certificate without key", ClientFiles{CertFile: cert}, "give both or neither"},
		{"mismatched client key", ClientFiles{CertFile: cert, KeyFile: otherKey}, "private key does not match public key"},
	} {
		t.Run("client "+tc.name, func(t *testing.T) {
			_, err := tc.files.Config()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	if c, err := (ClientFiles{}).Config(); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want nil, nil (Go's defaults)", c, err)
	}
}

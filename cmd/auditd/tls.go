package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/auditd/auditd/internal/redirect"
	"github.com/auditd/auditd/internal/tlsconf"
)

// validateTLS refuses a TLS configuration that cannot be right whatever
// the files hold: a certificate without its key (or the reverse), a
// client CA without a certificate to serve.
func (c *Config) validateTLS() error {
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return errors.New("config: tls_cert_file is set but tls_key_file is not: give both (--tls-cert-file, --tls-key-file) or neither")
	case c.TLSCertFile == "" && c.TLSKeyFile != "":
		return errors.New("config: tls_key_file is set but tls_cert_file is not: give both (--tls-cert-file, --tls-key-file) or neither")
	case c.TLSClientCAFile != "" && c.TLSCertFile == "":
		return errors.New("config: tls_client_ca_file needs tls_cert_file and tls_key_file: client certificates are asked for only over TLS")
	}
	return nil
}

// serverTLS loads the API listener's TLS configuration; nil without
// tls_cert_file.
func serverTLS(cfg Config, logger *slog.Logger) (*tlsconf.Server, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	s, err := tlsconf.NewServer(tlsconf.ServerFiles{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile,
		ClientCAFile: cfg.TLSClientCAFile}, logger)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return s, nil
}

// tlsListener wraps ln in TLS when serve has a TLS configuration, and
// returns the scheme of the URLs it serves.
func tlsListener(ln net.Listener, s *tlsconf.Server) (net.Listener, string) {
	if s == nil {
		return ln, "http"
	}
	return tls.NewListener(ln, s.Config()), "https"
}

// onSIGHUP calls reload on each SIGHUP until stop is called (serve's is
// the configuration reload, reload.go). Without it a SIGHUP would end serve.
func onSIGHUP(reload func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				reload()
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// clientTLS is how this auditd connects to another server over https (a
// peer, a witness), from the tls_ca_file, tls_client_cert_file and
// tls_client_key_file of its configuration, all optional: by default the
// system's CAs (SSL_CERT_FILE and SSL_CERT_DIR apply) and no client
// certificate; with tls_ca_file, only those CAs; with a client certificate
// and key (both or neither), presented to a server that requires one (its
// tls_client_ca_file), read again when they change. nil means Go's
// defaults.
func clientTLS(what, caFile, certFile, keyFile string) (*tls.Config, error) {
	tc, err := tlsconf.ClientFiles{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}.Config()
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", what, err)
	}
	return tc, nil
}

// clientTLSFlags are the TLS flags of the commands that talk to a server
// (prove, verify --server, status, alerts).
type clientTLSFlags struct{ files tlsconf.ClientFiles }

func bindClientTLSFlags(fs *flag.FlagSet, f *clientTLSFlags) {
	fs.StringVar(&f.files.CAFile, "ca-file", "", "PEM bundle of CAs to trust for an https:// server, instead of the system's (SSL_CERT_FILE also works)")
	fs.StringVar(&f.files.CertFile, "tls-client-cert", "", "client certificate (PEM) for a server that requires one (with --tls-client-key)")
	fs.StringVar(&f.files.KeyFile, "tls-client-key", "", "private key (PEM) of --tls-client-cert")
}

// config is the tls.Config of the flags; nil when none was given.
func (f *clientTLSFlags) config() (*tls.Config, error) { return f.files.Config() }

// httpClient is an http.Client using the flags' TLS configuration.
func (f *clientTLSFlags) httpClient() (*http.Client, error) {
	tc, err := f.config()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: tlsconf.Transport(tc), CheckRedirect: redirect.SameOrigin}, nil
}

// explainTLS adds what to do to the TLS errors a command's user can fix:
// a server certificate that is not trusted, a client certificate the
// server wants, plain HTTP to an https server and the reverse.
func explainTLS(err error) error {
	if err == nil {
		return nil
	}
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var expired x509.CertificateInvalidError
	s := err.Error()
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%w (the server's certificate is not signed by a CA this command trusts: give the CA with --ca-file, or SSL_CERT_FILE)", err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w (use the host name the certificate is for in --server)", err)
	case errors.As(err, &expired):
		return fmt.Errorf("%w (the server's certificate is not valid now)", err)
	case strings.Contains(s, "certificate required"), strings.Contains(s, "bad certificate"), strings.Contains(s, "unknown certificate authority"):
		return fmt.Errorf("%w (the server requires a client certificate its CA signed: --tls-client-cert and --tls-client-key)", err)
	case strings.Contains(s, `"https://`) && (strings.Contains(s, "broken pipe") || strings.Contains(s, "connection reset") || strings.HasSuffix(s, "EOF")):
		// TLS 1.3: a server refusing the client's certificate (or its
		// absence) may close the connection before the client reads why.
		return fmt.Errorf("%w (if the server requires client certificates: --tls-client-cert and --tls-client-key)", err)
	case strings.Contains(s, "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w (the server serves plain HTTP: use an http:// URL)", err)
	case strings.Contains(s, "Client sent an HTTP request to an HTTPS server"):
		return fmt.Errorf("%w (the server serves HTTPS: use an https:// URL)", err)
	}
	return err
}

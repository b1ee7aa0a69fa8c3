// Package tlsconf builds auditd's TLS configurations from PEM files: the
// server's, whose certificate is reloaded when its files change (or when
// Reload is called, on SIGHUP), and the clients' (the CLI commands, the
// peer cross-check and the witness submitter), which may trust a private
// CA and present a client certificate. It is the one place that reads
// these files, so that every side refuses the same mistakes with the same
// messages.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditd/auditd/internal/keyfile"
)

// MinVersion is the oldest TLS version either side accepts.
const MinVersion = tls.VersionTLS12

// DefaultPollInterval is how often, at most, a handshake looks at the
// certificate files' modification time and size.
const DefaultPollInterval = time.Second

// ServerFiles name the PEM files of a server's TLS configuration.
type ServerFiles struct {
	// CertFile is the certificate chain, leaf first; KeyFile its private
	// key. Both are required.
	CertFile, KeyFile string
	// ClientCAFile, if set, is a bundle of CA certificates: clients must
	// then present a certificate that chains to one of them.
	ClientCAFile string
}

// Server is a server's TLS configuration whose certificate follows its
// files: a handshake at most once per poll interval compares their
// modification times and sizes with those last loaded, and loads them
// again when they changed. A new certificate that does not load (a file
// missing or unparsable, a key that does not match) is refused with an
// error log and the previous one keeps serving.
type Server struct {
	files     ServerFiles
	clientCAs *x509.CertPool
	kp        *keyPair
	reloads   *prometheus.CounterVec
	expiry    prometheus.GaugeFunc
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithPollInterval sets how often, at most, handshakes look at the files
// (default DefaultPollInterval); 0 looks on every handshake.
func WithPollInterval(d time.Duration) ServerOption {
	return func(s *Server) { s.kp.interval = d }
}

// NewServer loads the files, refusing a missing file, a certificate or key
// that does not parse, a key that does not match the certificate, and a
// client CA file that holds no certificate.
func NewServer(files ServerFiles, logger *slog.Logger, opts ...ServerOption) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, errors.New("tls: a certificate file and a key file go together: give both or neither")
	}
	if files.CertFile == "" {
		return nil, errors.New("tls: no certificate file")
	}
	s := &Server{files: files}
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tls_certificate_reloads_total",
		Help: "Loads of the TLS certificate after its files changed or on SIGHUP, by result: ok, or error (the previous certificate keeps serving).",
	}, []string{"result"})
	s.reloads.WithLabelValues("ok")
	s.reloads.WithLabelValues("error")
	s.kp = &keyPair{certFile: files.CertFile, keyFile: files.KeyFile, interval: DefaultPollInterval, log: logger,
		what: "server", onReload: func(err error) {
			if err != nil {
				s.reloads.WithLabelValues("error").Inc()
			} else {
				s.reloads.WithLabelValues("ok").Inc()
			}
		}}
	for _, o := range opts {
		o(s)
	}
	if err := s.kp.load(); err != nil {
		return nil, err
	}
	if files.ClientCAFile != "" {
		pool, err := readCAs(files.ClientCAFile)
		if err != nil {
			return nil, err
		}
		s.clientCAs = pool
	}
	s.expiry = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tls_certificate_expiry_timestamp_seconds",
		Help: "When the TLS certificate being served expires (its NotAfter, Unix seconds).",
	}, func() float64 { return float64(s.Certificate().Leaf.NotAfter.Unix()) })
	return s, nil
}

// Config returns the server's tls.Config: TLS 1.2 at least, the current
// certificate on each handshake, HTTP/1.1, and, with a client CA file,
// client certificates required and verified.
func (s *Server) Config() *tls.Config {
	c := &tls.Config{
		MinVersion:     MinVersion,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.kp.get(), nil },
		// HTTP/1.1 only, as over plain HTTP: the server's per-connection
		// deadlines and limits mean the same either way, and a refused
		// client certificate reaches the client as its TLS error rather
		// than HTTP/2's "client conn could not be established".
		NextProtos: []string{"http/1.1"},
	}
	if s.clientCAs != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = s.clientCAs
	}
	return c
}

// Reload loads the certificate files now, changed or not (serve calls it
// on SIGHUP). On an error the previous certificate keeps serving; the
// error is logged, counted and returned.
func (s *Server) Reload() error { return s.kp.reload() }

// Certificate returns the certificate being served.
func (s *Server) Certificate() *tls.Certificate { return s.kp.get() }

// ClientAuth says whether clients must present a certificate.
func (s *Server) ClientAuth() bool { return s.clientCAs != nil }

// Collectors returns the reload counter and the expiry gauge, for
// registration (with the auditd_ prefix).
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.reloads, s.expiry}
}

// ClientFiles name the PEM files of a client's TLS configuration. All are
// optional.
type ClientFiles struct {
	// CAFile, if set, is the bundle of CA certificates the server's
	// certificate must chain to, instead of the system's (which
	// SSL_CERT_FILE and SSL_CERT_DIR can point elsewhere).
	CAFile string
	// CertFile and KeyFile, if set (both or neither), are the client
	// certificate presented to a server that asks for one. They are read
	// again when they change, as a server's are.
	CertFile, KeyFile string
}

// IsZero says that no file is named: the defaults apply.
func (f ClientFiles) IsZero() bool { return f == ClientFiles{} }

// Config returns the client's tls.Config, nil when no file is named (Go's
// defaults: the system's CAs, no client certificate). It refuses a missing
// or empty CA file, a client certificate without its key (or the
// reverse), and a key that does not match its certificate.
func (f ClientFiles) Config() (*tls.Config, error) {
	if f.IsZero() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: MinVersion}
	if f.CAFile != "" {
		pool, err := readCAs(f.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("tls: a client certificate and its key go together: give both or neither")
	}
	if f.CertFile != "" {
		kp := &keyPair{certFile: f.CertFile, keyFile: f.KeyFile, interval: DefaultPollInterval,
			log: slog.New(slog.DiscardHandler), what: "client"}
		if err := kp.load(); err != nil {
			return nil, err
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(), nil }
	}
	return c, nil
}

// Transport returns a clone of http.DefaultTransport using tc (which may
// be nil: Go's defaults).
func Transport(tc *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		t.TLSClientConfig = tc
	}
	return t
}

// maxPEMFile bounds a certificate or CA bundle file (Debian's whole CA
// bundle is about 220 KiB); a key file is bounded by keyfile.MaxSize.
// Like a key file, each must be a regular file: /dev/zero or a FIFO given
// by mistake is refused, not read without end.
const maxPEMFile = 4 << 20

// readCAs reads a PEM bundle of CA certificates.
func readCAs(path string) (*x509.CertPool, error) {
	b, _, err := keyfile.ReadLimit("tls: CA file", path, maxPEMFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// keyPair is a certificate and key read from files, read again (by get, at
// most once per interval) when the files' modification times or sizes
// change, and by reload. A pair that does not load leaves the previous one
// in place.
type keyPair struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger
	what              string          // "server" or "client", in log lines
	onReload          func(err error) // after each load but the first; may be nil

	cur    atomic.Pointer[tls.Certificate]
	polled atomic.Int64 // when the files were last looked at (UnixNano)

	mu    sync.Mutex // serialises loads
	tried fileStamp  // the files as last loaded (or tried)
}

// fileStamp is what a poll compares: modification times and sizes, zero
// for a file that could not be read.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func (k *keyPair) stamp() fileStamp {
	var st fileStamp
	if fi, err := os.Stat(k.certFile); err == nil {
		st.certMod, st.certSize = fi.ModTime(), fi.Size()
	}
	if fi, err := os.Stat(k.keyFile); err == nil {
		st.keyMod, st.keySize = fi.ModTime(), fi.Size()
	}
	return st
}

// read loads and checks the pair.
func (k *keyPair) read() (*tls.Certificate, error) {
	certPEM, _, err := keyfile.ReadLimit("tls: certificate file", k.certFile, maxPEMFile)
	if err != nil {
		return nil, err
	}
	keyPEM, _, err := keyfile.Read("tls: key file", k.keyFile)
	if err != nil {
		return nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", k.certFile, k.keyFile, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", k.certFile, err)
		}
	}
	return &c, nil
}

// load is the first load: an error is returned, not logged.
func (k *keyPair) load() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tried = k.stamp()
	c, err := k.read()
	if err != nil {
		return err
	}
	k.cur.Store(c)
	k.polled.Store(time.Now().UnixNano())
	if now := time.Now(); now.After(c.Leaf.NotAfter) {
		k.log.Warn("tls: the "+k.what+" certificate has expired", "file", k.certFile, "not_after", c.Leaf.NotAfter)
	}
	return nil
}

// get returns the current pair, first loading the files again if they
// changed since the last look (at most once per interval).
func (k *keyPair) get() *tls.Certificate {
	now := time.Now().UnixNano()
	last := k.polled.Load()
	if now-last >= int64(k.interval) && k.polled.CompareAndSwap(last, now) {
		k.mu.Lock()
		if st := k.stamp(); st != k.tried {
			k.tried = st
			_ = k.reloadLocked("changed")
		}
		k.mu.Unlock()
	}
	return k.cur.Load()
}

// reload loads the files now.
func (k *keyPair) reload() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tried = k.stamp()
	return k.reloadLocked("reload")
}

func (k *keyPair) reloadLocked(why string) error {
	c, err := k.read()
	if k.onReload != nil {
		k.onReload(err)
	}
	if err != nil {
		k.log.Error("tls: new "+k.what+" certificate refused; the previous one stays in use", "why", why, "err", err,
			"serial", k.cur.Load().Leaf.SerialNumber.String())
		return err
	}
	k.cur.Store(c)
	k.log.Info("tls: "+k.what+" certificate loaded", "why", why, "file", k.certFile,
		"serial", c.Leaf.SerialNumber.String(), "not_after", c.Leaf.NotAfter)
	return nil
}

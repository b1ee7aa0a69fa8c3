package loadtest

import (
	crand "crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
)

// Quiet is a logger that drops everything: the components a benchmark runs
// log nothing over its output.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// OpenLedger opens a quiet ledger in dir with a fresh signing key of
// origin name, and returns the key's verifier and its text form; opts
// follow the quiet logger, so they may override it.
func OpenLedger(dir, name string, opts ...ledger.Option) (*ledger.Store, note.Verifier, string, error) {
	skey, vkey, err := note.GenerateKey(crand.Reader, name)
	if err != nil {
		return nil, nil, "", fmt.Errorf("loadtest: key: %w", err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, nil, "", err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, nil, "", err
	}
	st, err := ledger.Open(dir, signer, verifier, append([]ledger.Option{ledger.WithLogger(Quiet())}, opts...)...)
	if err != nil {
		return nil, nil, "", err
	}
	return st, verifier, vkey, nil
}

// DataDir returns dir, or a new temporary directory when dir is empty;
// cleanup removes the temporary one (and leaves a given dir alone).
func DataDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "auditd-bench-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

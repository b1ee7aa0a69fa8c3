// Package ledgertest opens real ledger stores for tests: Pebble in the
// test's temporary directory, signed by a fresh Ed25519 key, quiet, and
// closed when the test ends. It replaces the store-opening boilerplate that
// every package's tests used to copy.
package ledgertest

import (
	"crypto/rand"
	"log/slog"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
)

// DefaultKeyName is the signer name of the key Open makes when it is given
// none; a log's checkpoint origin is DefaultKeyName + "/" + log.
const DefaultKeyName = "ledgertest.example"

// Key is a checkpoint signing key and its verifier.
type Key struct {
	Signer   note.Signer
	Verifier note.Verifier
	// VKey is the verifier key in note's text form (name+hash+key), as
	// servers publish it.
	VKey string
}

// NewKey makes a fresh Ed25519 key named name.
func NewKey(t testing.TB, name string) Key {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatalf("ledgertest: generate key %q: %v", name, err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatalf("ledgertest: signer: %v", err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatalf("ledgertest: verifier: %v", err)
	}
	return Key{Signer: signer, Verifier: verifier, VKey: vkey}
}

// Option configures Open.
type Option func(*config)

type config struct {
	dir     string
	key     *Key
	keyName string
	opts    []ledger.Option
}

// WithDir opens the store in dir instead of a fresh temporary directory (to
// open a store again after closing it).
func WithDir(dir string) Option { return func(c *config) { c.dir = dir } }

// WithKey signs with k instead of a fresh key.
func WithKey(k Key) Option { return func(c *config) { c.key = &k } }

// WithKeyName names the fresh key (when there is no WithKey).
func WithKeyName(name string) Option { return func(c *config) { c.keyName = name } }

// WithLedger passes options to ledger.Open, after the quiet logger Open
// sets (so a ledger.WithLogger here wins).
func WithLedger(opts ...ledger.Option) Option {
	return func(c *config) { c.opts = append(c.opts, opts...) }
}

// Open opens a ledger store. It is closed when the test ends (closing it
// earlier is fine: Close is idempotent).
func Open(t testing.TB, opts ...Option) *ledger.Store {
	t.Helper()
	s, _ := OpenKey(t, opts...)
	return s
}

// OpenKey is Open that also returns the key the store signs with.
func OpenKey(t testing.TB, opts ...Option) (*ledger.Store, Key) {
	t.Helper()
	c := config{keyName: DefaultKeyName}
	for _, o := range opts {
		o(&c)
	}
	if c.dir == "" {
		c.dir = t.TempDir()
	}
	if c.key == nil {
		k := NewKey(t, c.keyName)
		c.key = &k
	}
	lopts := append([]ledger.Option{ledger.WithLogger(slog.New(slog.DiscardHandler))}, c.opts...)
	s, err := ledger.Open(c.dir, c.key.Signer, c.key.Verifier, lopts...)
	if err != nil {
		t.Fatalf("ledgertest: open store in %s: %v", c.dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("ledgertest: close store in %s: %v", c.dir, err)
		}
	})
	return s, *c.key
}

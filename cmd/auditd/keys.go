package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// signingKey is a checkpoint key pair in signed-note form.
type signingKey struct {
	signer   note.Signer
	verifier note.Verifier
	vkey     string // verifier key text
}

// loadOrCreateKey reads the private key at path, or creates it (mode 0600,
// verifier key beside it in path+".pub") if it does not exist.
func loadOrCreateKey(path, name string) (*signingKey, bool, error) {
	b, err := os.ReadFile(path)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeNewKey(path, name); err != nil {
			return nil, false, err
		}
		b, err = os.ReadFile(path)
		created = true
	}
	if err != nil {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	k, err := parseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := checkOrigin(k, name); err != nil { // origin.go
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, created, nil
}

func writeNewKey(path, name string) error {
	skey, vkey, err := generateNoteKey(name) // name "" picks a unique one (origin.go)
	if err != nil {
		return fmt.Errorf("generate key %q: %w", name, err)
	}
	// Check the key before writing anything: a name the signer refuses
	// would leave a file behind that no later start (or retry) gets past.
	if _, err := parseKey(skey); err != nil {
		return fmt.Errorf("key name %q: %w (a name is printable, without spaces or +)", name, err)
	}
	if err := writeKeyFiles(path, skey, vkey); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	return nil
}

func parseKey(skey string) (*signingKey, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	vkey, err := verifierFromPrivate(skey)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	return &signingKey{signer: s, verifier: v, vkey: vkey}, nil
}

// verifierFromPrivate derives the verifier key text from a private key.
func verifierFromPrivate(skey string) (string, error) {
	// PRIVATE+KEY+<name>+<hash>+<base64(alg || private key)>
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 || parts[0] != "PRIVATE" || parts[1] != "KEY" {
		return "", errors.New("not a signed-note private key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("not an Ed25519 signed-note private key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}

func runKeygen(args []string) error {
	fset := flag.NewFlagSet("keygen", flag.ContinueOnError)
	name := fset.String("name", "", "key name; checkpoints of log L carry the origin NAME/L (default: HOST-KEYHASH, unique to the key)")
	out := fset.String("out", "auditd.key", "private key file to create (mode 0600); the verifier key goes to OUT.pub")
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "Usage: auditd keygen [-name NAME] [-out FILE]\n\nCreates an Ed25519 checkpoint signing key and prints its verifier key.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if fset.NArg() > 0 {
		return usageError{fmt.Errorf("keygen takes no arguments (got %q)", fset.Args())}
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s exists; refusing to overwrite a signing key", *out)
	}
	if err := writeNewKey(*out, *name); err != nil {
		return err
	}
	k, _, err := loadOrCreateKey(*out, *name)
	if err != nil {
		return err
	}
	fmt.Println(k.vkey)
	return nil
}

// writeKeyFiles writes a new key file at path (0600, refusing to replace
// one) holding skey, synced, and path.pub holding vkey.
func writeKeyFiles(path, skey, vkey string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.WriteFile(path+".pub", []byte(vkey+"\n"), 0o644)
}

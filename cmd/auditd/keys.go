package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/durable"
	"github.com/auditd/auditd/internal/keyfile"
)

// signingKey is a checkpoint key pair in signed-note form.
type signingKey struct {
	signer   note.Signer
	verifier note.Verifier
	vkey     string // verifier key text
}

// loadOrCreateKey is openSigningKey logging to slog.Default(), for callers
// that have no logger of their own.
func loadOrCreateKey(path, name string) (*signingKey, bool, error) {
	return openSigningKey(path, name, slog.Default())
}

// openSigningKey reads the private key at path, or creates it (mode 0600,
// verifier key beside it in path+".pub") if it does not exist. It reports
// whether it created the key. A path+".pub" that is missing, empty or not
// the key's verifier key (a crash while it was written, an edit) is
// rewritten from the private key, and logger says so. A path that is not
// a small regular file (/dev/zero, a FIFO) is refused (readKeyFile);
// checkKeyMode checks who else may read it.
func openSigningKey(path, name string, logger *slog.Logger) (*signingKey, bool, error) {
	b, _, err := readKeyFile(path)
	created := false
	if errors.Is(err, fs.ErrNotExist) {
		if err := writeNewKey(path, name); err != nil {
			return nil, false, err
		}
		b, _, err = readKeyFile(path)
		created = true
	}
	if err != nil {
		return nil, false, err
	}
	k, err := parseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	if err := checkOrigin(k, name); err != nil { // origin.go
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	repairPubFile(path+".pub", k.vkey, logger)
	return k, created, nil
}

// readKeyFile reads a checkpoint signing key file: a small regular file
// (keyfile.Read), returned with its permission bits.
func readKeyFile(path string) ([]byte, fs.FileMode, error) {
	return keyfile.Read("signing key file", path)
}

// repairPubFile makes sure the file pub holds the verifier key vkey,
// rewriting it durably when it is missing, empty or holds anything else,
// and logging why. A failure is logged, not returned: the private key is
// what signs, and a key in a read-only directory (a mounted secret) must
// not stop a start.
func repairPubFile(pub, vkey string, logger *slog.Logger) {
	b, _, err := keyfile.Read("verifier key file", pub)
	var why string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		why = "missing"
	case err != nil:
		logger.Warn("cannot read the verifier key file to check it against the private key", "file", pub, "err", err)
		return
	case strings.TrimSpace(string(b)) == "":
		why = "empty"
	case strings.TrimSpace(string(b)) == vkey:
		return
	default:
		why = "not the private key's verifier key"
	}
	if err := durable.WriteFile(pub, []byte(vkey+"\n"), 0o644); err != nil {
		logger.Warn("cannot rewrite the verifier key file from the private key", "file", pub, "reason", why, "err", err)
		return
	}
	logger.Warn("rewrote the verifier key file from the private key", "file", pub, "reason", why, "verifier_key", vkey)
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
	out := fset.String("out", "auditd.key", "private key file to create (mode 0600) in an existing directory; the verifier key goes to OUT.pub (0644)")
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
	// A typo in -out must not leave a key in a directory made for it.
	dir := filepath.Dir(*out)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("-out %s: directory %s does not exist (keygen does not create it: make it first, mode 0700)", *out, dir)
	} else if !fi.IsDir() {
		return fmt.Errorf("-out %s: %s is not a directory", *out, dir)
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

// writeKeyFiles writes a new key file at path (0600) holding skey, then
// path.pub (0644 whatever the umask: a public key) holding vkey, each durably: written under a temporary
// name, synced, moved into place and the directory synced, so that after a
// crash a file is whole or absent, never empty. The key file is moved into
// place with a hard link, which fails (fs.ErrExist) if path exists: a
// signing key is never replaced. A crash between the two files leaves no
// .pub; openSigningKey writes it at the next start.
func writeKeyFiles(path, skey, vkey string) error {
	dir := filepath.Dir(path)
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A name of our own (durable.IsTemp's form), for the synced key.
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	if err := durable.WriteFile(tmp, []byte(skey+"\n"), 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	err = os.Link(tmp, path)
	if rerr := os.Remove(tmp); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	if err := durable.SyncDir(dir); err != nil {
		return err
	}
	return durable.WriteFile(path+".pub", []byte(vkey+"\n"), 0o644) // public: 0644 whatever the umask (serve's is 077)
}

package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// generateNoteKey returns a new Ed25519 signed-note key pair named name.
// An empty name is replaced by a name unique to this key, chosen now and
// stored in the key file, so a data dir keeps its origin for as long as
// it keeps its key: "<host>-<first 8 hex digits of SHA-256(public key)>"
// (see docs/witness.md, "Origins").
func generateNoteKey(name string) (skey, vkey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	if name == "" {
		name = uniqueKeyName(hostName(), pub)
	}
	vkey, err = note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", "", fmt.Errorf("key name %q: %w", name, err)
	}
	// vkey is NAME+HASH+KEY; the private key shares its name and hash.
	hash := strings.Split(vkey, "+")[1]
	skey = "PRIVATE+KEY+" + name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, priv.Seed()...))
	return skey, vkey, nil
}

// uniqueKeyName is the default key name: the host name (letters, digits,
// '-' and '.' kept, others replaced by '-') and the key's hash.
func uniqueKeyName(host string, pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	host = strings.Trim(b.String(), "-.")
	if host == "" {
		host = "auditd"
	}
	if len(host) > 63 {
		host = host[:63]
	}
	return host + "-" + hex.EncodeToString(h[:4])
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// checkOrigin refuses an explicit origin (--origin, origin:) that is not
// the existing key's name: the origin is the key's, and changing it
// changes every log's checkpoints, which verifiers and witnesses must be
// told of first (docs/witness.md). Without one the key's name stands.
func checkOrigin(k *signingKey, origin string) error {
	if origin != "" && k.signer.Name() != origin {
		return fmt.Errorf("origin %q given, but the key is named %q: checkpoints carry the key's name; remove --origin to keep %q, or make a new key (docs/witness.md)", origin, k.signer.Name(), k.signer.Name())
	}
	return nil
}

// checkOriginName refuses an origin (--origin, origin:) that cannot name
// a signed-note key, before serve creates anything: such a name would
// otherwise be refused only when the key is generated, in a data dir
// already made for it.
func checkOriginName(name string) error {
	vkey, err := note.NewEd25519VerifierKey(name, make(ed25519.PublicKey, ed25519.PublicKeySize))
	if err == nil {
		_, err = note.NewVerifier(vkey)
	}
	if err != nil {
		return fmt.Errorf("config: origin %q: a key name is printable, without spaces or +", name)
	}
	return nil
}

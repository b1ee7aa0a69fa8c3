// Package witness holds the C2SP formats of transparency-log witnessing,
// without storage or HTTP: cosignature/v1 signers and verifiers
// (c2sp.org/tlog-cosignature), the add-checkpoint request body
// (c2sp.org/tlog-witness), and the policy a verifier applies to a
// cosigned checkpoint (N of these witnesses). Clients import it to check
// cosignatures; the witness server and the log's submitter live in
// witness/server and witness/submit.
package witness

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// AlgCosignatureV1 is the signed-note key type byte of Ed25519
// cosignature/v1 keys.
const AlgCosignatureV1 = 0x04

// Cosigner signs checkpoints with cosignature/v1 signatures: Ed25519 over
// "cosignature/v1\ntime <T>\n" followed by the checkpoint body, encoded as
// the 8-byte big-endian T followed by the 64-byte signature. It is a
// note.Signer, so note.Sign appends a cosignature line.
type Cosigner struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
	// Now is the clock of the timestamps (time.Now if nil).
	Now func() time.Time
}

var _ note.Signer = (*Cosigner)(nil)

// NewCosigner returns a cosigner named name (the witness's name, which
// cosignature lines carry) with the given key.
func NewCosigner(name string, key ed25519.PrivateKey) (*Cosigner, error) {
	if !validName(name) {
		return nil, fmt.Errorf("witness: invalid key name %q (printable, no spaces or +)", name)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("witness: not an Ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	return &Cosigner{name: name, hash: keyHash(name, pub), key: key}, nil
}

// Name returns the witness's name.
func (s *Cosigner) Name() string { return s.name }

// KeyHash returns the cosignature/v1 key hash.
func (s *Cosigner) KeyHash() uint32 { return s.hash }

// VerifierKey returns the cosignature/v1 verifier key text
// ("<name>+<hash>+<base64(0x04 || public key)>").
func (s *Cosigner) VerifierKey() string {
	return vkeyText(s.name, s.key.Public().(ed25519.PublicKey))
}

// Sign returns the cosignature of a checkpoint body.
func (s *Cosigner) Sign(msg []byte) ([]byte, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t := uint64(now().Unix())
	m, err := signedMessage(t, msg)
	if err != nil {
		return nil, err
	}
	sig := binary.BigEndian.AppendUint64(make([]byte, 0, 8+ed25519.SignatureSize), t)
	return append(sig, ed25519.Sign(s.key, m)...), nil
}

// signedMessage is the message a cosignature/v1 signature covers. The
// body must be a checkpoint in canonical form.
func signedMessage(t uint64, body []byte) ([]byte, error) {
	if _, err := merkle.ParseCheckpoint(body); err != nil {
		return nil, fmt.Errorf("witness: cosign: %w", err)
	}
	return append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), body...), nil
}

type cosigVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

func (v *cosigVerifier) Name() string    { return v.name }
func (v *cosigVerifier) KeyHash() uint32 { return v.hash }
func (v *cosigVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	m, err := signedMessage(binary.BigEndian.Uint64(sig), msg)
	return err == nil && ed25519.Verify(v.pub, m, sig[8:])
}

// NewVerifier parses a cosignature/v1 verifier key
// ("<name>+<hash>+<base64(0x04 || Ed25519 public key)>").
func NewVerifier(vkey string) (note.Verifier, error) {
	name, rest, _ := strings.Cut(vkey, "+")
	hash16, key64, _ := strings.Cut(rest, "+")
	key, err := base64.StdEncoding.DecodeString(key64)
	switch {
	case !validName(name) || len(hash16) != 8 || err != nil:
		return nil, fmt.Errorf("witness: malformed verifier key %q", vkey)
	case len(key) != 1+ed25519.PublicKeySize || key[0] != AlgCosignatureV1:
		return nil, fmt.Errorf("witness: verifier key %q is not an Ed25519 cosignature/v1 key (type 0x04)", vkey)
	}
	v := &cosigVerifier{name: name, pub: ed25519.PublicKey(key[1:])}
	v.hash = keyHash(name, v.pub)
	if fmt.Sprintf("%08x", v.hash) != hash16 {
		return nil, fmt.Errorf("witness: verifier key %q: key hash does not match", vkey)
	}
	return v, nil
}

// Timestamp returns the time a cosignature says it was made.
func Timestamp(sig note.Signature) (time.Time, error) {
	b, err := base64.StdEncoding.DecodeString(sig.Base64)
	if err != nil || len(b) != 4+8+ed25519.SignatureSize {
		return time.Time{}, errors.New("witness: malformed cosignature")
	}
	return time.Unix(int64(binary.BigEndian.Uint64(b[4:])), 0), nil
}

// GenerateKey returns a new cosigner private key text
// ("PRIVATE+KEY+<name>+<hash>+<base64(0x04 || seed)>") and its verifier
// key.
func GenerateKey(rnd io.Reader, name string) (skey, vkey string, err error) {
	if !validName(name) {
		return "", "", fmt.Errorf("witness: invalid key name %q (printable, no spaces or +)", name)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return "", "", err
	}
	h := keyHash(name, pub)
	skey = fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", name, h, base64.StdEncoding.EncodeToString(append([]byte{AlgCosignatureV1}, priv.Seed()...)))
	return skey, vkeyText(name, pub), nil
}

// ParseKey parses a cosigner private key as GenerateKey writes it. A
// signed-note Ed25519 key (type 0x01) is accepted too: the same Ed25519
// key then cosigns under its cosignature/v1 key hash.
func ParseKey(skey string) (*Cosigner, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 || parts[0] != "PRIVATE" || parts[1] != "KEY" {
		return nil, errors.New("witness: not a signed-note private key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || (raw[0] != AlgCosignatureV1 && raw[0] != 0x01) {
		return nil, errors.New("witness: not an Ed25519 private key")
	}
	return NewCosigner(parts[2], ed25519.NewKeyFromSeed(raw[1:]))
}

func vkeyText(name string, pub ed25519.PublicKey) string {
	return fmt.Sprintf("%s+%08x+%s", name, keyHash(name, pub), base64.StdEncoding.EncodeToString(append([]byte{AlgCosignatureV1}, pub...)))
}

// keyHash is the signed-note key hash: the first four bytes of
// SHA-256(name || "\n" || 0x04 || public key).
func keyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{AlgCosignatureV1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func validName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}

// Package merkle holds auditd's tree math and wire formats: RFC 6962 leaf and
// node hashing (through github.com/transparency-dev/merkle), inclusion and
// consistency proofs built from a hash reader and checked against a root, the
// versioned leaf encoding of a ledger entry, and C2SP tlog-checkpoint signed
// notes.
//
// The package is pure: no storage, no network, no context, no logging. Clients
// import it to verify what an auditd server returns.
package merkle

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/transparency-dev/merkle/rfc6962"
)

// HashSize is the size of a SHA-256 hash in bytes.
const HashSize = 32

// Hash is a SHA-256 hash: a leaf hash, a node hash or a tree root.
type Hash [HashSize]byte

// String returns the hash in standard base64, as used in checkpoints and the API.
func (h Hash) String() string { return base64.StdEncoding.EncodeToString(h[:]) }

// MarshalText encodes the hash in standard base64.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes a standard base64 hash.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHash decodes a hash written in standard base64.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return h, fmt.Errorf("merkle: malformed hash %q: %w", s, err)
	}
	if len(b) != HashSize {
		return h, fmt.Errorf("merkle: hash %q has %d bytes, want %d", s, len(b), HashSize)
	}
	copy(h[:], b)
	return h, nil
}

// hasher is the RFC 6962 SHA-256 tree hasher.
var hasher = rfc6962.DefaultHasher

// EmptyRoot is the root hash of the empty tree: SHA-256 of the empty string.
func EmptyRoot() Hash { return toHash(hasher.EmptyRoot()) }

// LeafHash returns the RFC 6962 hash of a leaf: SHA-256(0x00 || leaf). It
// is rfc6962.DefaultHasher.HashLeaf without its allocations (a hash state,
// the sum, and leaf itself escaping) for leaves of up to leafHashStack
// bytes, which are nearly all: the append path hashes every leaf (tests
// check the two agree).
func LeafHash(leaf []byte) Hash {
	var b []byte
	if len(leaf) <= leafHashStack {
		var stack [1 + leafHashStack]byte
		b = stack[:1+len(leaf)]
	} else {
		b = make([]byte, 1+len(leaf))
	}
	b[0] = 0 // the leaf prefix
	copy(b[1:], leaf)
	return sha256.Sum256(b)
}

const leafHashStack = 1024

// NodeHash returns the RFC 6962 hash of an interior node: SHA-256(0x01 ||
// left || right). It is rfc6962.DefaultHasher.HashChildren without the
// allocations, for the hot paths that hash many nodes (tests check the two
// agree).
func NodeHash(left, right Hash) Hash {
	var b [1 + 2*HashSize]byte
	b[0] = 1
	copy(b[1:], left[:])
	copy(b[1+HashSize:], right[:])
	return sha256.Sum256(b[:])
}

func toHash(b []byte) Hash {
	var h Hash
	copy(h[:], b)
	return h
}

func toSlices(hs []Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

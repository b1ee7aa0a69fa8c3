package merkle

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// Checkpoint is the body of a C2SP tlog-checkpoint: the log's origin, its
// size and its root hash.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   Hash
}

// Text returns the checkpoint body in the C2SP format: origin, decimal size
// and base64 root hash, one per line, each ending in a newline.
func (c Checkpoint) Text() []byte {
	return log.Checkpoint{Origin: c.Origin, Size: c.Size, Hash: c.Root[:]}.Marshal()
}

// Sign returns the checkpoint as a signed note.
func (c Checkpoint) Sign(s note.Signer) ([]byte, error) {
	if c.Origin == "" || strings.ContainsAny(c.Origin, "\n") {
		return nil, fmt.Errorf("merkle: invalid checkpoint origin %q", c.Origin)
	}
	b, err := note.Sign(&note.Note{Text: string(c.Text())}, s)
	if err != nil {
		return nil, fmt.Errorf("merkle: sign checkpoint %s@%d: %w", c.Origin, c.Size, err)
	}
	return b, nil
}

// ErrCheckpoint reports a checkpoint that does not parse or whose signature
// does not verify.
var ErrCheckpoint = errors.New("merkle: bad checkpoint")

// OpenCheckpoint verifies a signed checkpoint note against the log's verifier
// and parses its body. If origin is not empty the checkpoint must carry it.
// Extension lines after the root hash are allowed and ignored.
func OpenCheckpoint(signed []byte, v note.Verifier, origin string) (Checkpoint, error) {
	n, err := OpenNote(signed, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, err
	}
	if origin != "" && c.Origin != origin {
		return Checkpoint{}, fmt.Errorf("%w: origin %q, want %q", ErrCheckpoint, c.Origin, origin)
	}
	return c, nil
}

// OpenNote is note.Open made as strict as c2sp.org/signed-note asks: "If
// a signature from a known key fails to verify, clients SHOULD reject the
// whole note." note.Open verifies only the first signature line of each
// known key and skips the others, so a note with a good line and a bad one
// from the same key opens; OpenNote refuses it with a
// *note.InvalidSignatureError. Lines from unknown keys are still ignored,
// and every other error is note.Open's, unchanged.
func OpenNote(signed []byte, known note.Verifiers) (*note.Note, error) {
	n, err := note.Open(signed, known)
	if err != nil {
		return nil, err
	}
	// note.Open checked the form of every line and verified the first
	// line of each known key: what is left to verify are the later lines
	// of a known key that differ from its first.
	text := []byte(n.Text)
	sigs := signed[len(text)+1:]
	first := map[string]string{} // name+hash of a known key -> its first line
	for len(sigs) > 0 {
		i := bytes.IndexByte(sigs, '\n')
		line := strings.TrimPrefix(string(sigs[:i]), "\u2014 ")
		sigs = sigs[i+1:]
		name, b64, _ := strings.Cut(line, " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) < 5 { // note.Open refuses these; kept so a change there cannot panic here
			return nil, fmt.Errorf("merkle: malformed signature line %q", line)
		}
		hash := binary.BigEndian.Uint32(sig)
		v, err := known.Verifier(name, hash)
		if err != nil {
			continue // an unknown key (note.Open returned any other error)
		}
		id := fmt.Sprintf("%s+%08x", name, hash)
		if f, seen := first[id]; !seen || f == b64 {
			first[id] = b64 // the first line, which note.Open verified, or a copy of it
			continue
		}
		if !v.Verify(text, sig[4:]) {
			return nil, &note.InvalidSignatureError{Name: name, Hash: hash}
		}
	}
	return n, nil
}

// ParseCheckpoint parses an unsigned checkpoint body (the note text).
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	var lc log.Checkpoint
	if _, err := lc.Unmarshal(text); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if len(lc.Hash) != HashSize {
		return Checkpoint{}, fmt.Errorf("%w: root hash has %d bytes, want %d", ErrCheckpoint, len(lc.Hash), HashSize)
	}
	c := Checkpoint{Origin: lc.Origin, Size: lc.Size}
	copy(c.Root[:], lc.Hash)
	if !strings.HasPrefix(string(text), string(c.Text())) {
		// Leading zeros, a sign, or a non-canonical base64 encoding.
		return Checkpoint{}, fmt.Errorf("%w: body is not in canonical form", ErrCheckpoint)
	}
	return c, nil
}

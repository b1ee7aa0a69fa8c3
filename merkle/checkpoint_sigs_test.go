package merkle_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// sigLine is a signature line of key name+hash carrying sig.
func sigLine(name string, hash uint32, sig []byte) string {
	return "\u2014 " + name + " " + base64.StdEncoding.EncodeToString(append(binary.BigEndian.AppendUint32(nil, hash), sig...)) + "\n"
}

// corrupt returns the signature line with one bit of its signature (not of
// its key hash) flipped.
func corrupt(t testing.TB, line string) string {
	t.Helper()
	name, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(line, "\u2014 "), "\n"), " ")
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sig) < 5 {
		t.Fatalf("not a signature line: %q", line)
	}
	sig[len(sig)-1] ^= 1
	return "\u2014 " + name + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
}

// signedCheckpoint returns a checkpoint of size 1025 signed with the example
// key, split into its text (with the empty line) and its signature line.
func signedCheckpoint(t testing.TB) (signer note.Signer, v note.Verifier, text, line string) {
	t.Helper()
	signer, err := note.NewSigner(exampleSignerKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err = note.NewVerifier(exampleVerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	c := merkle.Checkpoint{Origin: "auditd.example/payments", Size: 1025, Root: merkle.LeafHash([]byte("root"))}
	b, err := c.Sign(signer)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(b, []byte("\n\n"))
	return signer, v, string(b[:i+2]), string(b[i+2:])
}

// TestOpenCheckpointBadLineOfKnownKey: c2sp.org/signed-note says a note
// with a signature from a known key that fails to verify SHOULD be
// rejected. note.Open lets one through when a good line of the same key
// comes first; OpenCheckpoint refuses it, wherever the bad line is, while
// lines of unknown keys (even sharing the name or the key hash of the
// log's key, not both) are still ignored.
func TestOpenCheckpointBadLineOfKnownKey(t *testing.T) {
	signer, v, text, good := signedCheckpoint(t)
	bad := corrupt(t, good)
	hash := signer.KeyHash()
	junk := []byte("not a signature, not even 64 bytes")
	unknown := sigLine("other.example", 0x01020304, junk)
	sameName := sigLine(signer.Name(), hash+1, junk)
	sameHash := sigLine("other.example", hash, junk)

	// The hole in note.Open that OpenNote closes.
	if _, err := note.Open([]byte(text+good+bad), note.VerifierList(v)); err != nil {
		t.Fatalf("note.Open refuses a good line then a bad one of the same key (%v): OpenNote's extra check may be moot now", err)
	}
	for _, tc := range []struct {
		name  string
		sigs  string
		valid bool
	}{
		{"good", good, true},
		{"good line twice", good + good, true},
		{"good then bad", good + bad, false},
		{"bad then good", bad + good, false},
		{"good, unknown, bad", good + unknown + bad, false},
		{"good, bad, good", good + bad + good, false},
		{"unknown key's garbage", unknown + good + unknown, true},
		{"known name, other key hash", sameName + good, true},
		{"known key hash, other name", good + sameHash, true},
		{"unknown only", unknown, false},
	} {
		c, err := merkle.OpenCheckpoint([]byte(text+tc.sigs), v, "auditd.example/payments")
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.valid && c.Size != 1025:
			t.Errorf("%s: size %d, want 1025", tc.name, c.Size)
		case !tc.valid && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case !tc.valid && !errors.Is(err, merkle.ErrCheckpoint):
			t.Errorf("%s: error %v is not ErrCheckpoint", tc.name, err)
		}
		if !tc.valid && tc.name != "unknown only" {
			_, err := merkle.OpenNote([]byte(text+tc.sigs), note.VerifierList(v))
			var inv *note.InvalidSignatureError
			if !errors.As(err, &inv) || inv.Name != signer.Name() || inv.Hash != hash {
				t.Errorf("%s: OpenNote error %v, want a *note.InvalidSignatureError for %s+%08x", tc.name, err, signer.Name(), hash)
			}
		}
	}
}

// digestKey is a test note key whose signatures are SHA-256 of the text
// followed by any byte, so one key can sign a text with several different
// valid lines (as a witness does, cosigning at different times).
type digestKey struct{}

func (digestKey) Name() string    { return "digest.example" }
func (digestKey) KeyHash() uint32 { return 0x0d16e57 }
func (digestKey) Verify(msg, sig []byte) bool {
	d := sha256.Sum256(msg)
	return len(sig) == len(d)+1 && bytes.Equal(sig[:len(d)], d[:])
}

// TestOpenNoteDifferentGoodLines: two different lines of one key that both
// verify are accepted; a third that does not is refused.
func TestOpenNoteDifferentGoodLines(t *testing.T) {
	text := "auditd.example/payments\n1025\n" + merkle.LeafHash([]byte("root")).String() + "\n"
	d := sha256.Sum256([]byte(text))
	line := func(b byte) string {
		return "\u2014 digest.example " + base64.StdEncoding.EncodeToString(append(binary.BigEndian.AppendUint32(nil, digestKey{}.KeyHash()), append(d[:], b)...)) + "\n"
	}
	wrong := "\u2014 digest.example " + base64.StdEncoding.EncodeToString(append(binary.BigEndian.AppendUint32(nil, digestKey{}.KeyHash()), make([]byte, 33)...)) + "\n"
	known := note.VerifierList(digestKey{})
	n, err := merkle.OpenNote([]byte(text+"\n"+line(1)+line(2)), known)
	if err != nil {
		t.Fatalf("two good lines: %v", err)
	}
	if n.Text != text || len(n.Sigs) != 1 {
		t.Errorf("note %q with %d signatures, want the text and 1 (note.Open keeps a key's first)", n.Text, len(n.Sigs))
	}
	if _, err := merkle.OpenNote([]byte(text+"\n"+line(1)+line(2)+wrong), known); err == nil {
		t.Errorf("two good lines and a bad one: accepted")
	}
}

// FuzzOpenNote: OpenNote accepts a note exactly when note.Open does and
// every signature line of a known key verifies.
func FuzzOpenNote(f *testing.F) {
	_, v, text, good := signedCheckpoint(f)
	bad := corrupt(f, good)
	unknown := sigLine("other.example", 0x01020304, []byte("junk"))
	for _, sigs := range []string{good, good + good, good + bad, bad + good, good + unknown + bad, unknown + good, unknown} {
		f.Add([]byte(text + sigs))
	}
	f.Add([]byte(text))
	f.Add([]byte{})
	known := note.VerifierList(v)
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := merkle.OpenNote(data, known)
		_, openErr := note.Open(data, known)
		if openErr != nil {
			if err == nil {
				t.Fatalf("OpenNote accepted a note note.Open refuses: %v", openErr)
			}
			return
		}
		// note.Open accepted: OpenNote must accept unless a line of the
		// known key fails to verify.
		split := bytes.LastIndex(data, []byte("\n\n"))
		body := data[:split+1]
		badLine := ""
		for _, line := range strings.Split(strings.TrimSuffix(string(data[split+2:]), "\n"), "\n") {
			name, b64, _ := strings.Cut(strings.TrimPrefix(line, "\u2014 "), " ")
			sig, _ := base64.StdEncoding.DecodeString(b64)
			if name == v.Name() && binary.BigEndian.Uint32(sig) == v.KeyHash() && !v.Verify(body, sig[4:]) {
				badLine = line
			}
		}
		switch {
		case badLine == "" && err != nil:
			t.Fatalf("OpenNote refused a note whose known lines all verify: %v", err)
		case badLine != "" && err == nil:
			t.Fatalf("OpenNote accepted a note with the bad line %q of a known key", badLine)
		case err == nil && n.Text != string(body):
			t.Fatalf("note text %q, want %q", n.Text, body)
		}
	})
}

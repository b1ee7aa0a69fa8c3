package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

func testCheckpoint(t testing.TB) (signed []byte, body string) {
	t.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, "log.example")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	c := merkle.Checkpoint{Origin: "log.example/payments", Size: 7, Root: merkle.LeafHash([]byte("x"))}
	signed, err = c.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return signed, string(c.Text())
}

func newCosigner(t testing.TB, name string) *Cosigner {
	t.Helper()
	skey, _, err := GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cosign(t testing.TB, signed []byte, c *Cosigner) []byte {
	t.Helper()
	n, err := note.Open(signed, note.VerifierList(noneVerifier{}))
	var u *note.UnverifiedNoteError
	if errors.As(err, &u) {
		n = u.Note
	} else if err != nil {
		t.Fatal(err)
	}
	out, err := note.Sign(&note.Note{Text: n.Text}, c)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(out, []byte("\n\n"))
	return append(append([]byte(nil), signed...), out[i+2:]...)
}

type noneVerifier struct{}

func (noneVerifier) Name() string            { return "none" }
func (noneVerifier) KeyHash() uint32         { return 0 }
func (noneVerifier) Verify(_, _ []byte) bool { return false }

// TestCosignatureSpec checks a cosignature against c2sp.org/tlog-cosignature
// with code written from the spec, not the package's: the key hash is
// SHA-256(name || "\n" || 0x04 || key)[:4], the signature is the 8-byte
// timestamp then Ed25519 over "cosignature/v1\ntime T\n" + body.
func TestCosignatureSpec(t *testing.T) {
	signed, body := testCheckpoint(t)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	c, err := NewCosigner("witness.example/w1", priv)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = func() time.Time { return time.Unix(1700000000, 0) }
	line := cosign(t, signed, c)[len(signed):]
	var name, b64 string
	if _, err := fmt.Sscanf(string(line), "— %s %s\n", &name, &b64); err != nil || name != "witness.example/w1" {
		t.Fatalf("cosignature line %q: %v", line, err)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 4+8+64 {
		t.Fatalf("cosignature %q: %d bytes, %v", b64, len(raw), err)
	}
	h := sha256.Sum256(append([]byte("witness.example/w1\n\x04"), pub...))
	if !bytes.Equal(raw[:4], h[:4]) {
		t.Errorf("key hash %x, want %x", raw[:4], h[:4])
	}
	if ts := binary.BigEndian.Uint64(raw[4:12]); ts != 1700000000 {
		t.Errorf("timestamp %d, want 1700000000", ts)
	}
	msg := "cosignature/v1\ntime 1700000000\n" + body
	if !ed25519.Verify(pub, []byte(msg), raw[12:]) {
		t.Error("signature does not verify over the spec's message")
	}
	wantVKey := "witness.example/w1+" + fmt.Sprintf("%x", h[:4]) + "+" + base64.StdEncoding.EncodeToString(append([]byte{4}, pub...))
	if c.VerifierKey() != wantVKey {
		t.Errorf("verifier key %s, want %s", c.VerifierKey(), wantVKey)
	}
	v, err := NewVerifier(wantVKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(append(signed, line...), note.VerifierList(v)); err != nil {
		t.Errorf("own verifier: %v", err)
	}
	ts, err := Timestamp(note.Signature{Base64: b64})
	if err != nil || ts.Unix() != 1700000000 {
		t.Errorf("Timestamp = %v, %v", ts, err)
	}
}

func TestVerifierRejects(t *testing.T) {
	_, ordinary, _ := note.GenerateKey(rand.Reader, "w.example")
	c := newCosigner(t, "w.example")
	good := c.VerifierKey()
	for name, k := range map[string]string{
		"signed-note Ed25519 key (0x01)": ordinary,
		"wrong hash":                     strings.Replace(good, "+", "+0", 1)[:len("w.example+")] + "00000000" + good[len("w.example+00000000"):],
		"no key":                         "w.example+00000000+",
		"renamed":                        "x.example" + good[len("w.example"):],
	} {
		if _, err := NewVerifier(k); err == nil {
			t.Errorf("%s: %q accepted", name, k)
		}
	}
	// A cosignature over a body that is not a checkpoint does not verify.
	v, _ := NewVerifier(good)
	sig, err := c.Sign([]byte("log.example/x\n1\n" + merkle.Hash{}.String() + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Verify([]byte("not a checkpoint\n"), sig) {
		t.Error("cosignature verified over another message")
	}
}

func TestPolicy(t *testing.T) {
	signed, _ := testCheckpoint(t)
	w1, w2, w3 := newCosigner(t, "w1.example"), newCosigner(t, "w2.example"), newCosigner(t, "w3.example")
	p, err := NewPolicy(2, w1.VerifierKey(), w2.VerifierKey(), w3.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	outsider := newCosigner(t, "w4.example")
	one := cosign(t, signed, w1)
	two := cosign(t, one, w3)
	for _, tc := range []struct {
		name string
		note []byte
		ok   bool
	}{
		{"no cosignature", signed, false},
		{"one of two", one, false},
		{"one twice", cosign(t, one, w1), false},
		{"one and an outsider", cosign(t, one, outsider), false},
		{"two", two, true},
		{"two, one forged", append(append([]byte(nil), one...), bytes.Replace(two[len(one):], []byte("— w3.example "), []byte("— w3.example A"), 1)...), false},
		{"two, then a bad line of one of them", append(bytes.Clone(two), corruptLine(t, string(one[len(signed):]))...), false},
		{"two and an outsider's garbage", append(bytes.Clone(two), "— w4.example AAAAAAAAAAAA\n"...), true},
	} {
		names, err := p.Check(tc.note)
		if tc.ok != (err == nil) {
			t.Errorf("%s: Check = %v, %v", tc.name, names, err)
		}
		if err != nil && !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: error %v does not wrap ErrPolicy", tc.name, err)
		}
	}
	if _, err := NewPolicy(3, w1.VerifierKey()); err == nil {
		t.Error("threshold 3 of 1 accepted")
	}
	if p, _ := NewPolicy(0, w1.VerifierKey(), w2.VerifierKey()); p.Threshold != 2 {
		t.Errorf("threshold 0 means all: got %d", p.Threshold)
	}
}

// corruptLine returns the signature line with the last bit of its
// signature flipped (its key hash kept).
func corruptLine(t *testing.T, line string) string {
	t.Helper()
	name, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(line, "\u2014 "), "\n"), " ")
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sig) < 5 {
		t.Fatalf("not a signature line: %q", line)
	}
	sig[len(sig)-1] ^= 1
	return "\u2014 " + name + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
}

func TestRequestRoundTrip(t *testing.T) {
	signed, _ := testCheckpoint(t)
	r := &Request{OldSize: 3, Proof: []merkle.Hash{merkle.LeafHash([]byte("a")), merkle.LeafHash([]byte("b"))}, Checkpoint: signed}
	b := r.Marshal()
	want := fmt.Sprintf("old 3\n%s\n%s\n\n%s", r.Proof[0], r.Proof[1], signed)
	if string(b) != want {
		t.Fatalf("Marshal = %q, want %q", b, want)
	}
	got, err := ParseRequest(b)
	if err != nil || got.OldSize != 3 || len(got.Proof) != 2 || got.Proof[1] != r.Proof[1] || !bytes.Equal(got.Checkpoint, signed) {
		t.Fatalf("ParseRequest = %+v, %v", got, err)
	}
	for _, bad := range []string{
		"old 3\n" + string(signed),    // no empty line
		"old -1\n\n" + string(signed), // negative
		"old 03\n\n" + string(signed), // not canonical
		"new 3\n\n" + string(signed),  // wrong keyword
		"old 3\nnot-base64\n\n" + string(signed),
		"old 3\n\n", // no checkpoint
		"old 3\n" + strings.Repeat(merkle.Hash{}.String()+"\n", 64) + "\n" + string(signed),
	} {
		if _, err := ParseRequest([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRequest(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	signed, _ := testCheckpoint(f)
	f.Add((&Request{OldSize: 1, Proof: []merkle.Hash{{}}, Checkpoint: signed}).Marshal())
	f.Add([]byte("old 0\n\nx"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.Marshal(), b) {
			t.Fatalf("Marshal(ParseRequest(%q)) = %q", b, r.Marshal())
		}
	})
}

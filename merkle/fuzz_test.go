package merkle_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

func FuzzLeaf(f *testing.F) {
	for _, l := range testLeaves() {
		if len(l.Key) > 1000 {
			continue // keep the seed corpus small
		}
		b, err := l.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{merkle.LeafVersion})
	f.Add(rawLeaf(1, "log", "id", 7, "key", 5, "topic", 1, 2))
	f.Add(rawLeaf(1, "log", "id", 0xff, "key", 5, "topic", 1, 2))
	f.Add(rawLeaf(2, "log", "id", 0, "", 0, "", 0, 0))
	f.Add(rawLeaf(1, "\xff", "id", 0, "", 0, "", 0, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		var l merkle.Leaf
		if err := l.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, merkle.ErrLeaf) {
				t.Fatalf("UnmarshalBinary error %v is not ErrLeaf", err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("decoded leaf does not validate: %v", err)
		}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded leaf does not encode: %v", err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("re-encoding differs:\n  in %x\n out %x", data, b)
		}
		if l.Size() != len(data) {
			t.Fatalf("Size() = %d for an encoding of %d bytes", l.Size(), len(data))
		}
		if h, err := l.Hash(); err != nil || h != merkle.LeafHash(data) {
			t.Fatalf("Hash() = %s, %v; want %s", h, err, merkle.LeafHash(data))
		}
	})
}

func FuzzCheckpoint(f *testing.F) {
	root := merkle.LeafHash([]byte("root")).String()
	for _, s := range []string{
		"auditd.example/log\n42\n" + root + "\n",
		"auditd.example/log\n0\n" + merkle.EmptyRoot().String() + "\n",
		"auditd.example/log\n18446744073709551615\n" + root + "\nextension\n",
		"auditd.example/log\n042\n" + root + "\n",
		"auditd.example/log\n+42\n" + root + "\n",
		"auditd.example/log\n42\n" + strings.TrimRight(root, "=") + "\n",
		"auditd.example/log\n42\n" + root + "\r\n",
		"auditd.example/log\n42\n" + root,
		"\n42\n" + root + "\n",
		"",
		"\n\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := merkle.ParseCheckpoint(data)
		if err != nil {
			if !errors.Is(err, merkle.ErrCheckpoint) {
				t.Fatalf("ParseCheckpoint error %v is not ErrCheckpoint", err)
			}
			return
		}
		text := c.Text()
		if !bytes.HasPrefix(data, text) {
			t.Fatalf("accepted body %q does not start with its canonical form %q", data, text)
		}
		again, err := merkle.ParseCheckpoint(text)
		if err != nil || again != c {
			t.Fatalf("canonical form %q parses to %+v, %v; want %+v", text, again, err, c)
		}
	})
}

// fuzzVerifierKey and fuzzSignerKey are a fixed test key pair (the same as
// the examples'), so that fuzz inputs stay valid across runs.
const (
	fuzzSignerKey   = exampleSignerKey
	fuzzVerifierKey = exampleVerifierKey
)

func FuzzOpenCheckpoint(f *testing.F) {
	signer, err := note.NewSigner(fuzzSignerKey)
	if err != nil {
		f.Fatal(err)
	}
	v, err := note.NewVerifier(fuzzVerifierKey)
	if err != nil {
		f.Fatal(err)
	}
	root := merkle.LeafHash([]byte("root"))
	for _, c := range []merkle.Checkpoint{
		{Origin: "auditd.example/log", Size: 42, Root: root},
		{Origin: "auditd.example/payments.0", Size: 0, Root: merkle.EmptyRoot()},
	} {
		b, err := c.Sign(signer)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, text := range []string{
		"auditd.example/log\n42\n" + root.String() + "\next\n",
		"auditd.example/log\n042\n" + root.String() + "\n",
		"not a checkpoint\n",
	} {
		b, err := note.Sign(&note.Note{Text: text}, signer)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("auditd.example/log\n42\n" + root.String() + "\n\n— auditd.example AAAA\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := merkle.OpenCheckpoint(data, v, "")
		if err != nil {
			if !errors.Is(err, merkle.ErrCheckpoint) {
				t.Fatalf("OpenCheckpoint error %v is not ErrCheckpoint", err)
			}
			return
		}
		// Accepted: the note verifies on its own and its text is the
		// checkpoint.
		n, err := note.Open(data, note.VerifierList(v))
		if err != nil {
			t.Fatalf("OpenCheckpoint accepted a note that note.Open rejects: %v", err)
		}
		if !strings.HasPrefix(n.Text, string(c.Text())) {
			t.Fatalf("note text %q does not start with the checkpoint %q", n.Text, c.Text())
		}
		if c2, err := merkle.OpenCheckpoint(data, v, c.Origin); err != nil || c2 != c {
			t.Fatalf("OpenCheckpoint with its own origin = %+v, %v; want %+v", c2, err, c)
		}
	})
}

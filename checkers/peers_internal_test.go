package checkers

import (
	"crypto/rand"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// FuzzPeerCheckpoint: whatever a peer sends, openPeerCheckpoint does not
// panic, returns exactly one of a checkpoint, a bad verdict or an error,
// and a checkpoint it returns verifies with the key and carries the origin.
func FuzzPeerCheckpoint(f *testing.F) {
	skey, vkey, err := note.GenerateKey(rand.Reader, "peer.example")
	if err != nil {
		f.Fatal(err)
	}
	s, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	const origin = "peer.example/pay.0"
	good, err := merkle.Checkpoint{Origin: origin, Size: 7, Root: merkle.Hash{7}}.Sign(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("peer.example/pay.0\n7\nAAAA\n\n— peer.example AAAA\n"))
	f.Add([]byte("hello"))
	other, _ := merkle.Checkpoint{Origin: "peer.example/x", Size: 1, Root: merkle.Hash{1}}.Sign(s)
	f.Add(other)
	f.Fuzz(func(t *testing.T, raw []byte) {
		cp, bad, err := openPeerCheckpoint(raw, v, origin)
		n := 0
		if cp != nil {
			n++
		}
		if bad != "" {
			n++
		}
		if err != nil {
			n++
		}
		if n != 1 {
			t.Fatalf("cp %v, bad %q, err %v: want exactly one", cp, bad, err)
		}
		if cp != nil {
			c, err := merkle.OpenCheckpoint(raw, v, origin)
			if err != nil || c != cp.Checkpoint {
				t.Fatalf("accepted %q: %v", raw, err)
			}
		}
	})
}

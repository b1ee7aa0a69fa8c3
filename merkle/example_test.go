package merkle_test

import (
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

// A test key pair, for examples only.
const (
	exampleSignerKey   = "PRIVATE+KEY+auditd.example+41e1a0f2+AQcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH"
	exampleVerifierKey = "auditd.example+41e1a0f2+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs"
)

// A client checks that a leaf is in a tree whose root it trusts (from a
// verified checkpoint), given the audit path the server returned.
func ExampleVerifyInclusion() {
	// A tree of four leaves, hashed by hand.
	var h [4]merkle.Hash
	for i := range h {
		h[i] = merkle.LeafHash([]byte{byte('a' + i)})
	}
	root := merkle.NodeHash(merkle.NodeHash(h[0], h[1]), merkle.NodeHash(h[2], h[3]))

	// The audit path of leaf 2: its sibling, then the left subtree.
	path := []merkle.Hash{h[3], merkle.NodeHash(h[0], h[1])}
	fmt.Println("leaf 2:", merkle.VerifyInclusion(2, 4, h[2], path, root))

	// The same path does not prove any other leaf.
	fmt.Println("leaf 1:", merkle.VerifyInclusion(1, 4, h[2], path, root) != nil)
	// Output:
	// leaf 2: <nil>
	// leaf 1: true
}

// A client verifies a checkpoint's signature with the log's public key and
// reads the tree size and root it commits to.
func ExampleOpenCheckpoint() {
	signer, err := note.NewSigner(exampleSignerKey)
	if err != nil {
		panic(err)
	}
	root := merkle.NodeHash(merkle.LeafHash([]byte("a")), merkle.LeafHash([]byte("b")))
	signed, err := merkle.Checkpoint{Origin: "auditd.example/payments.0", Size: 2, Root: root}.Sign(signer)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s", signed)

	// The client side: only the verifier key is needed.
	v, err := note.NewVerifier(exampleVerifierKey)
	if err != nil {
		panic(err)
	}
	c, err := merkle.OpenCheckpoint(signed, v, "auditd.example/payments.0")
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Size, c.Root == root)
	// Output:
	// auditd.example/payments.0
	// 2
	// sTeYX/SE+2ANuTEHx3sDZcgNePW0Kd7Q/Zc2HQd5mes=
	//
	// — auditd.example QeGg8ueMsg5FN2Bm4RdlFIBFcL/3BiyHaoW/IeDzaRsQ+tAwpjxkP6rv0nMF/XDpz5JFp3xoHt1hbSiY1YRdoHwg7gI=
	// 2 true
}

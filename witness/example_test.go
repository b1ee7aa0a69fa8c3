package witness_test

import (
	"bytes"
	"crypto/rand"
	"fmt"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/witness"
)

// A log signs a checkpoint, a witness cosigns it, and a verifier requires
// that witness's cosignature.
func ExamplePolicy() {
	skey, _, _ := note.GenerateKey(rand.Reader, "log.example")
	logSigner, _ := note.NewSigner(skey)
	signed, _ := merkle.Checkpoint{Origin: "log.example/orders", Size: 3, Root: merkle.EmptyRoot()}.Sign(logSigner)

	wkey, wvkey, _ := witness.GenerateKey(rand.Reader, "witness.example")
	cosigner, _ := witness.ParseKey(wkey)
	body := signed[:bytes.Index(signed, []byte("\n\n"))+1]
	both, _ := note.Sign(&note.Note{Text: string(body)}, cosigner)
	cosigned := append(signed, both[bytes.LastIndex(both, []byte("\n\n"))+2:]...)

	p, _ := witness.NewPolicy(1, wvkey)
	_, err := p.Check(signed)
	fmt.Println("log signature only:", err != nil)
	names, err := p.Check(cosigned)
	fmt.Println("cosigned:", names, err)
	// Output:
	// log signature only: true
	// cosigned: [witness.example] <nil>
}

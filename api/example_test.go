package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// A test key pair, for examples only.
const (
	exampleSignerKey   = "PRIVATE+KEY+auditd.example+41e1a0f2+AQcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcH"
	exampleVerifierKey = "auditd.example+41e1a0f2+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs"
)

// A producer posts an event and waits for the signed checkpoint that covers
// it; the response carries the inclusion proof, which the producer checks
// against the checkpoint with the log's public key alone.
func ExampleNew() {
	signer, _ := note.NewSigner(exampleSignerKey)
	verifier, _ := note.NewVerifier(exampleVerifierKey)
	dir, _ := os.MkdirTemp("", "auditd-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := ledger.Open(dir, signer, verifier, ledger.WithLogger(quiet))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	srv := httptest.NewServer(api.New(store, exampleVerifierKey, api.Options{Limits: api.Limits{CreateLogs: true}, Logger: quiet}))
	defer srv.Close()

	body := `{"id":"order-1","time":"2024-05-01T10:00:00Z","payload":{"total": 42}}` + "\n" +
		`{"id":"order-2","time":"2024-05-01T10:00:01Z","payload":{"total": 7}}` + "\n"
	res, err := http.Post(srv.URL+"/v1/logs/orders/entries?wait=checkpoint", "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	var out struct {
		Entries []struct {
			Index          uint64        `json:"index"`
			LeafHash       merkle.Hash   `json:"leaf_hash"`
			InclusionProof []merkle.Hash `json:"inclusion_proof"`
		} `json:"entries"`
		Checkpoint string `json:"checkpoint"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		fmt.Println(err)
		return
	}
	cp, err := merkle.OpenCheckpoint([]byte(out.Checkpoint), verifier, "auditd.example/orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out.Checkpoint)
	for _, e := range out.Entries {
		fmt.Printf("entry %d: %v\n", e.Index, merkle.VerifyInclusion(e.Index, cp.Size, e.LeafHash, e.InclusionProof, cp.Root))
	}
	// Output:
	// auditd.example/orders
	// 2
	// goEPjxgTqujOHWRupU0HwyVPoXQ+5E3BB7KoAvM4I+I=
	//
	// — auditd.example QeGg8gkvs4TBofSPzFdndIEhHR8ygoPuwuB6cgddyCJUu+M+hBMYzKLCr+cbJlT7JuEtQCnxhFHfWGeNBbVKgiN7TAo=
	// entry 0: <nil>
	// entry 1: <nil>
}

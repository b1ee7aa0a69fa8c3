package web_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/merkle"
)

type fixtureEntry struct {
	ID            string          `json:"id"`
	Key           *string         `json:"key,omitempty"`
	KeyBase64     *string         `json:"key_base64,omitempty"`
	Time          string          `json:"time"`
	TimeAssigned  bool            `json:"time_assigned"`
	Source        *merkle.Source  `json:"source,omitempty"`
	Headers       []merkle.Header `json:"headers,omitempty"`
	Marks         []string        `json:"marks,omitempty"`
	PayloadBase64 string          `json:"payload_base64"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Leaf          string          `json:"leaf"`
	LeafHash      string          `json:"leaf_hash"`
}

// TestVerifyJS runs web/static/verify.js under node (web/e2e/verify.test.mjs)
// on the ledger-format test vectors and on a fixture made here with the
// merkle package: leaves with a binary key, headers, marks, a source
// position and times before 1970 and with nanoseconds, and a checkpoint
// signed with golang.org/x/mod/sumdb/note.
func TestVerifyJS(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and node is missing")
		}
		t.Skip("node is not installed")
	}
	const log = "payments.3"
	str := func(s string) *string { return &s }
	type in struct {
		e       fixtureEntry
		key     []byte
		hasKey  bool
		t       time.Time
		marks   uint8
		payload []byte
	}
	ins := []in{
		{e: fixtureEntry{ID: "k-bin", KeyBase64: str(base64.StdEncoding.EncodeToString([]byte{0, 0xff, 0x80}))}, key: []byte{0, 0xff, 0x80}, hasKey: true,
			t: time.Date(1969, 7, 20, 20, 17, 40, 123, time.UTC), payload: []byte(`{"a":1}`)},
		{e: fixtureEntry{ID: "h-2", Key: str("acct-1"), TimeAssigned: true, Source: &merkle.Source{Topic: "payments", Partition: 3, Offset: 1 << 40},
			Headers: []merkle.Header{{Key: "id", Value: []byte("h-2")}, {Key: "trace", Value: []byte{0, 1, 2}}, {Key: "id", Value: nil}}},
			key: []byte("acct-1"), hasKey: true, t: time.Date(2026, 12, 1, 10, 0, 0, 999999999, time.UTC), payload: []byte{0xde, 0xad}},
		{e: fixtureEntry{ID: "m-3", Source: &merkle.Source{Topic: "payments", Partition: 3, Offset: 7}, Marks: []string{"not_json", "empty"}},
			t: time.Date(2026, 12, 1, 10, 0, 1, 0, time.UTC), marks: merkle.MarkEmpty | 1, payload: nil},
	}
	var entries []fixtureEntry
	var leafHashes []merkle.Hash
	for _, x := range ins {
		ph := sha256.Sum256(x.payload)
		l := merkle.Leaf{Log: log, ID: x.e.ID, HasKey: x.hasKey, Key: x.key, Time: x.t.UnixNano(), TimeAssigned: x.e.TimeAssigned,
			Source: x.e.Source, Headers: x.e.Headers, Marks: x.marks, PayloadSHA256: ph}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", x.e.ID, err)
		}
		lh := merkle.LeafHash(b)
		leafHashes = append(leafHashes, lh)
		e := x.e
		e.Time = x.t.Format(time.RFC3339Nano)
		e.PayloadBase64 = base64.StdEncoding.EncodeToString(x.payload)
		e.PayloadSHA256 = base64.StdEncoding.EncodeToString(ph[:])
		e.Leaf = base64.StdEncoding.EncodeToString(b)
		e.LeafHash = base64.StdEncoding.EncodeToString(lh[:])
		entries = append(entries, e)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "auditd.example")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	origin := "auditd.example/" + log
	body := origin + "\n3\n" + base64.StdEncoding.EncodeToString(leafHashes[0][:]) + "\n"
	signed, err := note.Sign(&note.Note{Text: body}, signer)
	if err != nil {
		t.Fatal(err)
	}
	fx, _ := json.Marshal(map[string]any{"log": log, "entries": entries, "vkey": vkey, "checkpoint": string(signed), "size": 3, "origin": origin})
	path := filepath.Join(t.TempDir(), "fixture.json")
	if err := os.WriteFile(path, fx, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(nodeBin, "e2e/verify.test.mjs", path).CombinedOutput()
	t.Logf("%s", out)
	if err != nil || strings.Contains(string(out), "FAIL") {
		t.Fatalf("verify.js: %v", err)
	}
}

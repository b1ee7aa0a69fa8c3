package merkle_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/merkle"
)

// The test vectors of docs/ledger-format.md. TestVectors checks that the
// code produces exactly these values and that the document shows every one
// of them, so the two cannot drift apart.
var leafVectors = []struct {
	name     string
	log, id  string
	key      *string // nil: no key
	time     string  // RFC 3339, as GET entry shows it
	assigned bool
	source   *merkle.Source
	payload  string // base64, as payload_base64 shows it

	payloadSHA256 string // base64
	leafHex       string
	leafHash      string // base64
}{
	{
		name: "minimal", log: "orders-http", id: "evt-1", time: "2024-01-02T03:04:05Z",
		payload:       "eyJhbW91bnQiOjV9", // {"amount":5}
		payloadSHA256: "foTL8PenySwDcFhmXWYVL464WAqyU05SyHe8zOucx78=",
		leafHex:       "010b6f72646572732d6874747000056576742d310017a668b7300132007e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf",
		leafHash:      "c5LcqceXLKOLPCOJrZ+J0Cto4JqC5LUdRRP3uxs7SQ8=",
	},
	{
		name: "with key", log: "orders-http", id: "evt-2", key: ptr("customer-42"), time: "2024-01-02T03:04:05.123456789Z",
		payload:       "eyJhbW91bnQiOjcsImN1cnJlbmN5IjoiRVVSIn0=", // {"amount":7,"currency":"EUR"}
		payloadSHA256: "P1Lj5B+w/sF+msnez6ZbQMc72OYOAtZ+wIpn5OfYgCw=",
		leafHex:       "010b6f72646572732d6874747000056576742d3201000b637573746f6d65722d343217a668b7375cff153f52e3e41fb0fec17e9ac9decfa65b40c73bd8e60e02d67ec08a67e4e7d8802c",
		leafHash:      "F2IRI8PEOCOcmMHuruRcsNRZe6TCuv2sGo3Z+7cyZbQ=",
	},
	{
		name: "source and assigned time", log: "payments.0", id: "evt-3", time: "2024-01-02T03:04:06.5Z", assigned: true,
		source:        &merkle.Source{Topic: "payments", Partition: 0, Offset: 1234},
		payload:       "AAEC/w==",
		payloadSHA256: "PR9XyYSXjvmKGDeMgWbBy47eAsA+62rufi8SHf7uPlY=",
		leafHex:       "010a7061796d656e74732e3000056576742d330617a668b78969610000087061796d656e74730000000000000000000004d23d1f57c984978ef98a18378c8166c1cb8ede02c03eeb6aee7e2f121dfeee3e56",
		leafHash:      "4tmRvd02/wJ7eFW6tBAKCuE0uUThd0wzQ/Qta511AN4=",
	},
	{
		name: "empty key, empty payload", log: "orders-http", id: "evt-4", key: ptr(""), time: "2024-01-02T03:04:07Z",
		payload:       "",
		payloadSHA256: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
		leafHex:       "010b6f72646572732d6874747000056576742d3401000017a668b7a736c600e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		leafHash:      "w9MpKj+COGt7+J7F8UOMSut30uS5UP7RCH3CMWlvEB8=",
	},
}

// The tree of the orders-http vectors (evt-1, evt-2, evt-4 at indexes 0, 1,
// 2) and its checkpoint body.
const (
	vectorRoot2     = "qVjKCQu+pR5Sd+I5dL63y/73yg/xHJsGs9cN1WDGq2g="
	vectorRoot3     = "etJLp8VAiO93cOIBcnAM4+XPs+cxA8aZlzOZOTnFh+I="
	vectorCheckText = "auditd.example/orders-http\n3\netJLp8VAiO93cOIBcnAM4+XPs+cxA8aZlzOZOTnFh+I=\n"
)

func ptr(s string) *string { return &s }

func TestVectors(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/ledger-format.md")
	if err != nil {
		t.Fatalf("the test vectors live in docs/ledger-format.md: %v", err)
	}
	inDoc := func(what, s string) {
		t.Helper()
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/ledger-format.md does not show %s %q", what, s)
		}
	}
	hashes := map[string]merkle.Hash{}
	for _, v := range leafVectors {
		tm, err := time.Parse(time.RFC3339Nano, v.time)
		if err != nil {
			t.Fatal(err)
		}
		if got := tm.UTC().Format(time.RFC3339Nano); got != v.time {
			t.Errorf("%s: time %q is not as the API writes it (%q)", v.name, v.time, got)
		}
		payload, err := base64.StdEncoding.DecodeString(v.payload)
		if err != nil {
			t.Fatal(err)
		}
		l := merkle.Leaf{Log: v.log, ID: v.id, Time: tm.UnixNano(), TimeAssigned: v.assigned, Source: v.source,
			PayloadSHA256: sha256.Sum256(payload)}
		if v.key != nil {
			l.HasKey, l.Key = true, []byte(*v.key)
		}
		if got := base64.StdEncoding.EncodeToString(l.PayloadSHA256[:]); got != v.payloadSHA256 {
			t.Errorf("%s: payload SHA-256 %s, want %s", v.name, got, v.payloadSHA256)
		}
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b); got != v.leafHex {
			t.Errorf("%s: leaf\n got %s\nwant %s", v.name, got, v.leafHex)
		}
		h := merkle.LeafHash(b)
		if h.String() != v.leafHash {
			t.Errorf("%s: leaf hash %s, want %s", v.name, h, v.leafHash)
		}
		want, err := hex.DecodeString(v.leafHex)
		if err != nil {
			t.Fatal(err)
		}
		var back merkle.Leaf
		if err := back.UnmarshalBinary(want); err != nil {
			t.Errorf("%s: vector does not decode: %v", v.name, err)
		} else if !sameLeaf(&back, &l) {
			t.Errorf("%s: vector decodes to %+v, want %+v", v.name, back, l)
		}
		hashes[v.id] = h
		inDoc("the leaf of "+v.name, v.leafHex)
		inDoc("the leaf hash of "+v.name, v.leafHash)
		inDoc("the payload hash of "+v.name, v.payloadSHA256)
		inDoc("the time of "+v.name, v.time)
		if v.payload != "" {
			inDoc("the payload of "+v.name, v.payload)
		}
	}
	root2 := merkle.NodeHash(hashes["evt-1"], hashes["evt-2"])
	root3 := merkle.NodeHash(root2, hashes["evt-4"])
	if root2.String() != vectorRoot2 || root3.String() != vectorRoot3 {
		t.Errorf("roots %s, %s; want %s, %s", root2, root3, vectorRoot2, vectorRoot3)
	}
	c := merkle.Checkpoint{Origin: "auditd.example/orders-http", Size: 3, Root: root3}
	if got := string(c.Text()); got != vectorCheckText {
		t.Errorf("checkpoint body %q, want %q", got, vectorCheckText)
	}
	inDoc("the two-leaf root", vectorRoot2)
	inDoc("the three-leaf root", vectorRoot3)
	inDoc("the checkpoint body", vectorCheckText)
}

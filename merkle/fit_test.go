package merkle_test

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/auditd/auditd/merkle"
)

func fitLeaf(key []byte, headers ...merkle.Header) merkle.Leaf {
	return merkle.Leaf{Log: "t.0", ID: "id", HasKey: key != nil, Key: key, Time: 1,
		Source: &merkle.Source{Topic: "t", Partition: 0, Offset: 7}, Headers: headers}
}

// TestLeafFit: Fit leaves a leaf that fits as it is, and brings one over
// MaxLeafSize under it by hashing the header values over 32 bytes, then
// the key, marking what it hashed, without touching the caller's slices.
func TestLeafFit(t *testing.T) {
	small := merkle.Header{Key: "trace", Value: []byte("short")}
	big := merkle.Header{Key: "blob", Value: bytes.Repeat([]byte("v"), 40000)}

	l := fitLeaf([]byte("k"), small, merkle.Header{Key: "b", Value: bytes.Repeat([]byte("v"), 30000)})
	before := l
	if !l.Fit() || l.Marks != 0 || !bytes.Equal(l.Headers[1].Value, before.Headers[1].Value) {
		t.Fatalf("a leaf of %d bytes was changed: marks %v", before.Size(), merkle.MarkNames(l.Marks))
	}

	in := []merkle.Header{small, big, big}
	l = fitLeaf([]byte("k"), in...)
	if l.Size() <= merkle.MaxLeafSize {
		t.Fatal("test leaf is not over the bound")
	}
	if !l.Fit() || l.Size() > merkle.MaxLeafSize || l.Marks != merkle.MarkHeaderOversize {
		t.Fatalf("headers of 80 KB: Fit gave %d bytes, marks %v", l.Size(), merkle.MarkNames(l.Marks))
	}
	sum := sha256.Sum256(big.Value)
	if string(l.Headers[0].Value) != "short" || !bytes.Equal(l.Headers[1].Value, sum[:]) || string(l.Key) != "k" {
		t.Errorf("after Fit: headers %q, key %q", l.Headers, l.Key)
	}
	if !bytes.Equal(in[1].Value, big.Value) {
		t.Error("Fit modified the caller's headers")
	}
	b, err := l.MarshalBinary()
	var back merkle.Leaf
	if err != nil || back.UnmarshalBinary(b) != nil || back.Marks != merkle.MarkHeaderOversize {
		t.Errorf("fitted leaf does not round-trip: %v", err)
	}

	key := bytes.Repeat([]byte("K"), merkle.MaxKey)
	l = fitLeaf(key, big)
	if !l.Fit() || l.Size() > merkle.MaxLeafSize || l.Marks != merkle.MarkHeaderOversize|merkle.MarkKeyOversize {
		t.Fatalf("key of %d bytes: Fit gave %d bytes, marks %v", len(key), l.Size(), merkle.MarkNames(l.Marks))
	}
	if ks := sha256.Sum256(key); !bytes.Equal(l.Key, ks[:]) {
		t.Errorf("key not replaced by its SHA-256")
	}

	// The decision counts the id as MaxID bytes: a leaf that fits with a
	// short id but would not with a fallback id is fitted already.
	l = fitLeaf(bytes.Repeat([]byte("K"), merkle.MaxLeafSize-200))
	if l.Size() > merkle.MaxLeafSize {
		t.Fatal("test leaf does not fit as it is")
	}
	if !l.Fit() || l.Marks != merkle.MarkKeyOversize {
		t.Errorf("leaf within MaxID of the bound: marks %v", merkle.MarkNames(l.Marks))
	}

	// Too many headers: no hashing helps.
	many := make([]merkle.Header, 12000)
	for i := range many {
		many[i] = merkle.Header{Key: strings.Repeat("h", 1)}
	}
	l = fitLeaf(nil, many...)
	if l.Fit() {
		t.Errorf("12,000 headers reported as fitting in %d bytes", l.Size())
	}
}

package merkle_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/auditd/auditd/merkle"
)

// TestAppendID checks that AppendID encodes exactly what Append encodes for
// the same leaf with its ID set, and refuses the ids Append refuses.
func TestAppendID(t *testing.T) {
	leaves := []merkle.Leaf{
		{Log: "pay", ID: "a", Time: 1},
		{Log: "pay", ID: "0b7e4c1e-4c1a-4f7b-9a51-3c9f6f2b8d10", HasKey: true, Key: []byte("acct-7"), Time: -5, TimeAssigned: true,
			Source:  &merkle.Source{Topic: "payments", Partition: 3, Offset: 1 << 40},
			Headers: []merkle.Header{{Key: "h", Value: []byte("v")}, {Key: "", Value: []byte{}}}, Marks: merkle.MarkOversize},
		{Log: "l", ID: strings.Repeat("é", merkle.MaxID/2), PayloadSHA256: merkle.Hash{1, 2, 3}},
	}
	for i, l := range leaves {
		want, err := l.Append([]byte{0})
		if err != nil {
			t.Fatalf("leaf %d: Append: %v", i, err)
		}
		id := []byte(l.ID)
		l.ID = "something else entirely"
		got, err := l.AppendID([]byte{0}, id)
		if err != nil {
			t.Fatalf("leaf %d: AppendID: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("leaf %d: AppendID encoded\n%x\nAppend encoded\n%x", i, got, want)
		}
	}
	base := merkle.Leaf{Log: "pay", Time: 1}
	for _, id := range [][]byte{nil, {}, bytes.Repeat([]byte("x"), merkle.MaxID+1), {0xff, 0xfe}} {
		l := base
		l.ID = string(id)
		_, wantErr := l.Append(nil)
		_, err := base.AppendID(nil, id)
		if err == nil || wantErr == nil || !errors.Is(err, merkle.ErrLeaf) {
			t.Errorf("id %q: AppendID error %v, Append error %v; want both to refuse it with ErrLeaf", id, err, wantErr)
		}
	}
	// The rest of the leaf is still validated.
	bad := merkle.Leaf{Log: "", Time: 1}
	if _, err := bad.AppendID(nil, []byte("a")); !errors.Is(err, merkle.ErrLeaf) {
		t.Errorf("empty log name: AppendID error %v, want ErrLeaf", err)
	}
}

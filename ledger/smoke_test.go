package ledger

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/merkle"
)

func TestSmoke(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "test.example")
	s, _ := note.NewSigner(skey)
	v, _ := note.NewVerifier(vkey)
	st, err := Open(t.TempDir(), s, v)
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.CreateLog("a")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var leaves [][]byte
	for i := 0; i < 700; i += 7 {
		var es []Entry
		for j := 0; j < 7; j++ {
			es = append(es, Entry{ID: fmt.Sprint(i + j), Payload: []byte(fmt.Sprint("p", i+j))})
		}
		res, err := l.Append(ctx, es)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Entries {
			r, err := l.Entry(a.Index)
			if err != nil {
				t.Fatal(err)
			}
			leaves = append(leaves, r.LeafBytes)
		}
	}
	var stored []tlog.Hash
	hr := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, lb := range leaves {
		hs, err := tlog.StoredHashes(int64(i), lb, hr)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
	}
	for _, n := range []uint64{1, 2, 255, 256, 257, 300, 511, 512, 700} {
		root, err := l.RootAt(n)
		if err != nil {
			t.Fatal(err)
		}
		th, err := tlog.TreeHash(int64(n), hr)
		if err != nil {
			t.Fatal(err)
		}
		if th != tlog.Hash(root) {
			t.Fatalf("root %d mismatch", n)
		}
	}
	cp, err := l.WaitCheckpoint(ctx, 700)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", cp.Note)
	p, err := l.InclusionProof(5, 700)
	if err != nil {
		t.Fatal(err)
	}
	if err := merkle.VerifyInclusion(5, 700, merkle.LeafHash(leaves[5]), p, cp.Root); err != nil {
		t.Fatal(err)
	}
	st.Close()
}

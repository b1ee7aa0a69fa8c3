package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
)

// TestWitnessPolicy: with WithWitnessPolicy, Checkpoint accepts the
// checkpoint the server serves only when enough of the policy's witnesses
// cosigned it (the server appends their lines through api.Witnessing).
func TestWitnessPolicy(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(keyName))
	l, err := store.CreateLog("orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), []ledger.Entry{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitCheckpoint(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cosigner := func(name string) (*witness.Cosigner, string) {
		skey, vkey, err := witness.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := witness.ParseKey(skey)
		return c, vkey
	}
	w1, k1 := cosigner("w1.example")
	_, k2 := cosigner("w2.example")
	cosigned := func(_ string, cp *ledger.SignedCheckpoint) []byte {
		n, _ := note.Open(cp.Note, note.VerifierList(key.Verifier))
		b, _ := note.Sign(&note.Note{Text: n.Text}, w1)
		return append(append([]byte(nil), cp.Note...), b[bytes.LastIndex(b, []byte("\n\n"))+2:]...)
	}
	srv := httptest.NewServer(api.New(store, key.VKey, api.Options{Components: api.Components{Witnessing: api.Witnessing{Cosigned: cosigned}}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name      string
		threshold int
		keys      []string
		ok        bool
	}{
		{"w1", 1, []string{k1}, true},
		{"w1 or w2", 1, []string{k1, k2}, true},
		{"w1 and w2", 2, []string{k1, k2}, false},
		{"w2", 1, []string{k2}, false},
	} {
		p, err := witness.NewPolicy(tc.threshold, tc.keys...)
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(srv.URL, key.Verifier, client.WithWitnessPolicy(p))
		_, _, err = c.Checkpoint(context.Background(), "orders")
		if tc.ok != (err == nil) {
			t.Errorf("%s: Checkpoint: %v", tc.name, err)
		}
		if err != nil && !errors.Is(err, client.ErrVerification) {
			t.Errorf("%s: %v is not an ErrVerification", tc.name, err)
		}
	}
	// Without a policy the cosignature line is ignored.
	if _, _, err := client.New(srv.URL, key.Verifier).Checkpoint(context.Background(), "orders"); err != nil {
		t.Errorf("no policy: %v", err)
	}
}

package interop_test

// Interoperability of auditd's witnessing (witness, witness/server,
// witness/submit) with other projects' implementations of
// c2sp.org/tlog-witness and c2sp.org/tlog-cosignature:
//
//   - filippo.io/torchwood v0.6.1: its witness, cmd/litewitness, built from
//     the module (a tool of this module, see go.mod) and run as a process
//     on loopback, configured with its cmd/witnessctl, its Ed25519 key in a
//     dedicated OpenSSH ssh-agent and its state in SQLite
//     (litewitness_test.go); and, as a module, its cosignature/v1 signer
//     and verifier, its checkpoint parser and CosignatureTimestamp.
//   - github.com/transparency-dev/formats v0.1.1: its cosignature/v1
//     verifier (note.NewVerifierForCosignatureV1, from the vkey text
//     alone) and its witness policy (witness.NewGroup).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	fnote "github.com/transparency-dev/formats/note"
	fwitness "github.com/transparency-dev/formats/witness"
	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

func appendN(t testing.TB, l *ledger.Log, n int) *ledger.SignedCheckpoint {
	t.Helper()
	es := make([]ledger.Entry, n)
	for i := range es {
		es[i] = ledger.Entry{Payload: []byte(fmt.Sprintf("e%d-%d", l.Size(), i))}
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	cp, err := l.WaitCheckpoint(context.Background(), l.Size())
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// waitCosigned waits for the submitter to report a cosignature of size
// or more.
func waitCosigned(t testing.TB, cosigned <-chan uint64, size uint64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-cosigned:
			if got >= size {
				return
			}
		case <-deadline:
			t.Fatalf("no cosignature of size %d within 30s", size)
		}
	}
}

// formatsPolicy is transparency-dev/formats' witness policy: one of the
// witness vkeys.
func formatsPolicy(t testing.TB, vkey string) fwitness.Group {
	t.Helper()
	w, err := fwitness.New(vkey, &url.URL{Scheme: "http", Host: "unused.example"})
	if err != nil {
		t.Fatal(err)
	}
	return fwitness.NewGroup(1, w)
}

// submitTo runs a submitter of l to the witness at url, cosignatures
// checked with v; it reports each cosignature's size on cosigned and each
// failed submission on failed (nil: the test fails on one).
func submitTo(t *testing.T, l *ledger.Log, url string, v note.Verifier, cosigned chan<- uint64, failed chan<- error) *submit.Submitter {
	t.Helper()
	onError := func(_, _ string, err error) { t.Errorf("submission failed: %v", err) }
	if failed != nil {
		onError = func(_, _ string, err error) {
			select {
			case failed <- err:
			default:
			}
		}
	}
	sub, err := submit.New(func() []submit.Log { return []submit.Log{l} }, []submit.Witness{{URL: url, Verifier: v}},
		submit.Options{Logger: slog.New(slog.DiscardHandler), MinBackoff: time.Millisecond,
			OnCosigned: func(_, _ string, size uint64) { cosigned <- size }, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return sub
}

// TestAuditdLogToLitewitness: auditd as a log submits its checkpoints to
// torchwood's litewitness, which checks the consistency proofs auditd
// sends and keeps its state in SQLite; the cosignatures auditd then serves
// verify with torchwood's verifier and with formats' (from the vkey
// alone), and satisfy formats' witness policy.
func TestAuditdLogToLitewitness(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	lw := startLitewitness(t, "torchwood.example/witness")
	lw.addLog(t, l.Origin(), key.VKey)
	v, err := witness.NewVerifier(lw.vkey) // auditd reads litewitness's vkey
	if err != nil {
		t.Fatal(err)
	}
	fv, err := fnote.NewVerifierForCosignatureV1(lw.vkey)
	if err != nil {
		t.Fatal(err)
	}
	policy := formatsPolicy(t, lw.vkey)
	if policy.Satisfied(l.Checkpoint().Note) {
		t.Fatal("formats' policy is satisfied by a checkpoint without cosignatures")
	}
	cosigned := make(chan uint64, 100)
	sub := submitTo(t, l, lw.url, v, cosigned, nil)
	for _, n := range []int{1, 255, 300, 1024} { // sizes 1, 256, 556, 1580: proofs across tiles
		cp := appendN(t, l, n)
		waitCosigned(t, cosigned, cp.Size)
		signed := sub.Cosigned("payments", l.Checkpoint())
		if _, err := note.Open(signed, note.VerifierList(lw.verifier)); err != nil {
			t.Fatalf("size %d: torchwood's verifier rejects the served cosignature: %v\n%s", cp.Size, err, signed)
		}
		if _, err := note.Open(signed, note.VerifierList(fv)); err != nil {
			t.Fatalf("size %d: formats' verifier rejects the served cosignature: %v", cp.Size, err)
		}
		if !policy.Satisfied(signed) {
			t.Fatalf("size %d: formats' witness policy is not satisfied by\n%s", cp.Size, signed)
		}
		if got := lw.size(t, l.Origin()); got != int64(l.Checkpoint().Size) {
			t.Fatalf("litewitness holds size %d, want %d", got, l.Checkpoint().Size)
		}
	}
}

// TestLitewitnessRefusesUnknownKey: litewitness refuses a checkpoint of
// the origin it knows signed by a key it was not given (another store's,
// same origin): the submitter reports the 403, auditd serves no
// cosignature, and litewitness still holds size 0.
func TestLitewitnessRefusesUnknownKey(t *testing.T) {
	_, given := ledgertest.OpenKey(t)
	store := ledgertest.Open(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	lw := startLitewitness(t, "torchwood.example/witness")
	lw.addLog(t, l.Origin(), given.VKey) // the same origin, another key
	v, err := witness.NewVerifier(lw.vkey)
	if err != nil {
		t.Fatal(err)
	}
	cp := appendN(t, l, 300)
	cosigned := make(chan uint64, 100)
	failed := make(chan error, 1)
	sub := submitTo(t, l, lw.url, v, cosigned, failed)
	select {
	case err := <-failed:
		if !strings.Contains(err.Error(), "403") {
			t.Fatalf("the submission failed with %v, want litewitness's 403", err)
		}
	case size := <-cosigned:
		t.Fatalf("litewitness cosigned size %d of a checkpoint signed by a key it was not given", size)
	case <-time.After(30 * time.Second):
		t.Fatal("no submission failure within 30s")
	}
	// The submitter sends to one witness one request at a time: none
	// succeeded before the failure it reported.
	select {
	case size := <-cosigned:
		t.Fatalf("litewitness cosigned size %d", size)
	default:
	}
	if signed := sub.Cosigned("payments", cp); !bytes.Equal(signed, cp.Note) {
		t.Fatalf("auditd serves a cosignature litewitness refused:\n%s", signed)
	}
	if got := lw.size(t, l.Origin()); got != 0 {
		t.Fatalf("litewitness holds size %d after refusing the checkpoint", got)
	}
}

// TestAuditdWitnessVerifiedByTorchwood: auditd as a witness. torchwood's
// cosignature verifier (for the same Ed25519 key and name) and formats'
// (from auditd's vkey text) accept its cosignatures, torchwood encodes the
// same vkey, and litewitness accepts the requests auditd's witness does.
func TestAuditdWitnessVerifiedByTorchwood(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("orders")
	if err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := witness.GenerateKey(rand.Reader, "auditd.example/witness")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, _ := witness.ParseKey(skey)
	b, _ := ledgertest.Open(t).Bucket("witness")
	srv, err := server.New(b, cosigner, []server.Log{{Origin: l.Origin(), Verifier: key.Verifier}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(skey, "+", 5)
	seed, _ := base64.StdEncoding.DecodeString(parts[4])
	ts, err := torchwood.NewCosignatureSigner("auditd.example/witness", ed25519.NewKeyFromSeed(seed[1:]))
	if err != nil {
		t.Fatal(err)
	}
	if ts.Verifier().String() != vkey {
		t.Fatalf("torchwood encodes the verifier key as %s, auditd as %s", ts.Verifier().String(), vkey)
	}
	fv, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	lw := startLitewitness(t, "torchwood.example/witness")
	lw.addLog(t, l.Origin(), key.VKey)
	var old uint64
	for _, n := range []int{3, 300} {
		cp := appendN(t, l, n)
		req := &witness.Request{OldSize: old, Checkpoint: cp.Note}
		if old > 0 {
			p, err := l.ConsistencyProof(old, cp.Size)
			if err != nil {
				t.Fatal(err)
			}
			req.Proof = p
		}
		resp, err := http.Post(lw.url+"/add-checkpoint", "text/plain", bytes.NewReader(req.Marshal()))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("litewitness rejects the request at size %d: %d %s", cp.Size, resp.StatusCode, got)
		}
		if _, err := note.Open(append(append([]byte(nil), cp.Note...), got...), note.VerifierList(lw.verifier)); err != nil {
			t.Fatalf("litewitness's answer at size %d is not its cosignature: %v\n%s", cp.Size, err, got)
		}
		lines, err := srv.AddCheckpoint(req.Marshal())
		if err != nil {
			t.Fatalf("auditd witness at size %d: %v", cp.Size, err)
		}
		signed := append(append([]byte(nil), cp.Note...), lines...)
		for name, v := range map[string]note.Verifier{"torchwood": ts.Verifier(), "formats": fv} {
			n, err := note.Open(signed, note.VerifierList(v))
			if err != nil {
				t.Fatalf("%s's verifier rejects auditd's cosignature %q: %v", name, lines, err)
			}
			if name == "torchwood" {
				if when, err := torchwood.CosignatureTimestamp(n.Sigs[0]); err != nil || time.Since(time.Unix(when, 0)) > time.Hour {
					t.Errorf("torchwood reads the cosignature's time as %d, %v", when, err)
				}
			}
		}
		if !formatsPolicy(t, vkey).Satisfied(signed) {
			t.Errorf("formats' witness policy is not satisfied by auditd's cosignature")
		}
		old = cp.Size
	}
}

package interop_test

// Interoperability of auditd's witnessing (witness, witness/server,
// witness/submit) with other projects' implementations of
// c2sp.org/tlog-witness and c2sp.org/tlog-cosignature:
//
//   - filippo.io/torchwood v0.6.1: its cosignature/v1 signer and verifier
//     and its checkpoint parser, as a module; and its witness
//     (internal/witness, the core of cmd/litewitness). litewitness does not
//     build here (zombiezen.com/go/sqlite and golang.org/x/net at the
//     versions it needs are not in the module cache, and nothing may be
//     downloaded), and internal/witness cannot be imported, so twWitness
//     below is that file's add-checkpoint logic transcribed (BSD-style
//     licence, Copyright 2023 The Go Authors and The Torchwood Authors),
//     its SQLite tables replaced by a map, signing with torchwood's own
//     CosignatureSigner and checking consistency with
//     golang.org/x/mod/sumdb/tlog, not with the transparency-dev/merkle
//     code auditd uses.
//   - github.com/transparency-dev/formats v0.1.1: its cosignature/v1
//     verifier (note.NewVerifierForCosignatureV1, from the vkey text
//     alone) and its witness policy (witness.NewGroup).

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/torchwood"
	fnote "github.com/transparency-dev/formats/note"
	fwitness "github.com/transparency-dev/formats/witness"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

// --- transcribed from torchwood v0.6.1 internal/witness/witness.go ---

// twWitness is torchwood's internal/witness.Witness, its log and key
// tables in a map.
type twWitness struct {
	s    *torchwood.CosignatureSigner
	mu   sync.Mutex
	logs map[string]*twLog
}

type twLog struct {
	keys []note.Verifier
	size int64
	hash tlog.Hash
}

type twConflictError struct{ known int64 }

func (*twConflictError) Error() string { return "known tree size doesn't match provided old size" }

var (
	errUnknownLog       = errors.New("unknown log")
	errInvalidSignature = errors.New("invalid signature")
	errBadRequest       = errors.New("invalid input")
	errProof            = errors.New("bad consistency proof")
)

func (w *twWitness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	cosig, err := w.processAddCheckpointRequest(body)
	if err, ok := err.(*twConflictError); ok {
		rw.Header().Set("Content-Type", "text/x.tlog.size")
		rw.WriteHeader(http.StatusConflict)
		fmt.Fprintf(rw, "%d\n", err.known)
		return
	}
	switch err {
	case errUnknownLog, errInvalidSignature:
		http.Error(rw, err.Error(), http.StatusForbidden)
		return
	case errBadRequest:
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	case errProof:
		http.Error(rw, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Write(cosig)
}

func (w *twWitness) processAddCheckpointRequest(body []byte) ([]byte, error) {
	body, noteBytes, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return nil, errBadRequest
	}
	lines := strings.Split(string(body), "\n")
	size, ok := strings.CutPrefix(lines[0], "old ")
	if !ok {
		return nil, errBadRequest
	}
	oldSize, err := strconv.ParseInt(size, 10, 64)
	if err != nil || oldSize < 0 {
		return nil, errBadRequest
	}
	proof := make(tlog.TreeProof, len(lines[1:]))
	for i, h := range lines[1:] {
		proof[i], err = tlog.ParseHash(h)
		if err != nil {
			return nil, errBadRequest
		}
	}
	origin, _, _ := strings.Cut(string(noteBytes), "\n")
	w.mu.Lock()
	defer w.mu.Unlock()
	l, ok := w.logs[origin]
	if !ok {
		return nil, errUnknownLog
	}
	n, err := note.Open(noteBytes, note.VerifierList(l.keys...))
	switch err.(type) {
	case *note.UnverifiedNoteError, *note.InvalidSignatureError:
		return nil, errInvalidSignature
	}
	if err != nil {
		return nil, err
	}
	c, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		return nil, err
	}
	if oldSize > c.N {
		return nil, errBadRequest
	}
	if l.size != oldSize {
		return nil, &twConflictError{l.size}
	}
	if oldSize != 0 {
		if err := tlog.CheckTree(proof, c.N, c.Hash, oldSize, l.hash); err != nil {
			return nil, errProof
		}
	}
	l.size, l.hash = c.N, c.Hash
	signed, err := note.Sign(&note.Note{Text: n.Text}, w.s)
	if err != nil {
		return nil, err
	}
	split := bytes.LastIndex(signed, []byte("\n\n"))
	return signed[split+2:], nil
}

// --- end of the transcription ---

func newTWWitness(t testing.TB, name string) (*twWitness, *httptest.Server) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, err := torchwood.NewCosignatureSigner(name, priv)
	if err != nil {
		t.Fatal(err)
	}
	w := &twWitness{s: signer, logs: map[string]*twLog{}}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/add-checkpoint" || r.Method != http.MethodPost {
			http.NotFound(rw, r)
			return
		}
		w.ServeHTTP(rw, r)
	}))
	t.Cleanup(ts.Close)
	return w, ts
}

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

// TestAuditdLogToTorchwoodWitness: auditd as a log submits its
// checkpoints to torchwood's witness, which checks the consistency proofs
// auditd sends with x/mod's tlog; the cosignatures auditd then serves
// verify with torchwood's verifier and with formats' (from the vkey
// alone), and satisfy formats' witness policy.
func TestAuditdLogToTorchwoodWitness(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	tw, ts := newTWWitness(t, "torchwood.example/witness")
	tw.logs[l.Origin()] = &twLog{keys: []note.Verifier{key.Verifier}} // witnessctl add-log, add-key
	vkey := tw.s.Verifier().String()
	v, err := witness.NewVerifier(vkey) // auditd reads torchwood's vkey
	if err != nil {
		t.Fatal(err)
	}
	fv, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	policy := formatsPolicy(t, vkey)
	cosigned := make(chan uint64, 100)
	sub, err := submit.New(func() []submit.Log { return []submit.Log{l} }, []submit.Witness{{URL: ts.URL, Verifier: v}},
		submit.Options{Logger: slog.New(slog.DiscardHandler), MinBackoff: time.Millisecond,
			OnCosigned: func(_, _ string, size uint64) { cosigned <- size },
			OnError:    func(_, _ string, err error) { t.Errorf("submission failed: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sub.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if policy.Satisfied(l.Checkpoint().Note) {
		t.Fatal("formats' policy is satisfied by a checkpoint without cosignatures")
	}
	for _, n := range []int{1, 255, 300, 1024} { // sizes 1, 256, 556, 1580: proofs across tiles
		cp := appendN(t, l, n)
		waitCosigned(t, cosigned, cp.Size)
		signed := sub.Cosigned("payments", l.Checkpoint())
		if _, err := note.Open(signed, note.VerifierList(tw.s.Verifier())); err != nil {
			t.Fatalf("size %d: torchwood's verifier rejects the served cosignature: %v\n%s", cp.Size, err, signed)
		}
		if _, err := note.Open(signed, note.VerifierList(fv)); err != nil {
			t.Fatalf("size %d: formats' verifier rejects the served cosignature: %v", cp.Size, err)
		}
		if !policy.Satisfied(signed) {
			t.Fatalf("size %d: formats' witness policy is not satisfied by\n%s", cp.Size, signed)
		}
		tw.mu.Lock()
		got := tw.logs[l.Origin()].size
		tw.mu.Unlock()
		if got != int64(l.Checkpoint().Size) {
			t.Fatalf("torchwood's witness holds size %d, want %d", got, l.Checkpoint().Size)
		}
	}
}

// TestAuditdWitnessVerifiedByTorchwood: auditd as a witness. torchwood's
// cosignature verifier (for the same Ed25519 key and name) and formats'
// (from auditd's vkey text) accept its cosignatures, torchwood encodes the
// same vkey, and torchwood's witness accepts the requests auditd's does.
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
	tw, _ := newTWWitness(t, "torchwood.example/witness")
	tw.logs[l.Origin()] = &twLog{keys: []note.Verifier{key.Verifier}}
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
		if _, err := tw.processAddCheckpointRequest(req.Marshal()); err != nil {
			t.Fatalf("torchwood's witness rejects the request at size %d: %v", cp.Size, err)
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

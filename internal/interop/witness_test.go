package interop

// Interoperability of auditd's witnessing (witness, witness/server,
// witness/submit) with filippo.io/torchwood v0.6.1's implementation of
// c2sp.org/tlog-witness and c2sp.org/tlog-cosignature.
//
// torchwood v0.6.1 (its litewitness command and its root package) does
// not build here: its dependencies (golang.org/x/crypto, zombiezen.com/go/
// sqlite, modernc.org/sqlite, sigsum.org/sigsum-go, ...) are not in the
// module cache and nothing may be downloaded. The code below is therefore
// torchwood's own, transcribed from the module cache
// (filippo.io/torchwood@v0.6.1: cosignature.go, checkpoint.go and
// internal/witness/witness.go; BSD-style licence, Copyright 2023 The Go
// Authors and The Torchwood Authors), with its SQLite tables replaced by a
// map and nothing else changed in substance. It checks consistency with
// golang.org/x/mod/sumdb/tlog, not with the transparency-dev/merkle code
// auditd uses, and computes key hashes and signed messages itself.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/witness"
	"github.com/auditd/auditd/witness/server"
	"github.com/auditd/auditd/witness/submit"
)

// --- transcribed from torchwood v0.6.1 ---

const algCosignatureV1 = 4

func twKeyHash(name string, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

type twCheckpoint struct {
	Origin string
	tlog.Tree
	Extension string
}

func twParseCheckpoint(text string) (twCheckpoint, error) {
	if strings.Count(text, "\n") < 3 || len(text) > 1e6 || !strings.HasSuffix(text, "\n") {
		return twCheckpoint{}, errors.New("malformed checkpoint")
	}
	lines := strings.SplitN(text, "\n", 4)
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || lines[1] != strconv.FormatInt(n, 10) {
		return twCheckpoint{}, errors.New("malformed checkpoint")
	}
	h, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(h) != tlog.HashSize {
		return twCheckpoint{}, errors.New("malformed checkpoint")
	}
	rest := lines[3]
	for rest != "" {
		before, after, found := strings.Cut(rest, "\n")
		if before == "" || !found {
			return twCheckpoint{}, errors.New("malformed checkpoint")
		}
		rest = after
	}
	var hash tlog.Hash
	copy(hash[:], h)
	return twCheckpoint{lines[0], tlog.Tree{N: n, Hash: hash}, lines[3]}, nil
}

func (c twCheckpoint) String() string {
	return fmt.Sprintf("%s\n%d\n%s\n%s", c.Origin, c.N, base64.StdEncoding.EncodeToString(c.Hash[:]), c.Extension)
}

func twFormatCosignatureV1(t uint64, msg []byte) ([]byte, error) {
	c, err := twParseCheckpoint(string(msg))
	if err != nil {
		return nil, fmt.Errorf("message being signed is not a valid checkpoint: %w", err)
	}
	if string(msg) != c.String() {
		return nil, errors.New("message being signed does not match parsed checkpoint")
	}
	return []byte(fmt.Sprintf("cosignature/v1\ntime %d\n%s", t, msg)), nil
}

// twCosignatureVerifier is torchwood's CosignatureVerifier.
type twCosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func newTWVerifier(name string, k ed25519.PublicKey) *twCosignatureVerifier {
	return &twCosignatureVerifier{name: name, hash: twKeyHash(name, append([]byte{algCosignatureV1}, k...)), key: k}
}

func (v *twCosignatureVerifier) Name() string    { return v.name }
func (v *twCosignatureVerifier) KeyHash() uint32 { return v.hash }
func (v *twCosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	m, err := twFormatCosignatureV1(t, msg)
	if err != nil {
		return false
	}
	return ed25519.Verify(v.key, m, sig[8:])
}

func (v *twCosignatureVerifier) String() string {
	return fmt.Sprintf("%s+%08x+%s", v.name, v.hash, base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, v.key...)))
}

// twCosignatureSigner is torchwood's CosignatureSigner.
type twCosignatureSigner struct {
	v   *twCosignatureVerifier
	key crypto.Signer
}

func (s *twCosignatureSigner) Name() string    { return s.v.name }
func (s *twCosignatureSigner) KeyHash() uint32 { return s.v.hash }
func (s *twCosignatureSigner) Sign(msg []byte) ([]byte, error) {
	t := uint64(time.Now().Unix())
	m, err := twFormatCosignatureV1(t, msg)
	if err != nil {
		return nil, err
	}
	sg, err := s.key.Sign(nil, m, crypto.Hash(0))
	if err != nil {
		return nil, err
	}
	sig := binary.BigEndian.AppendUint64(make([]byte, 0, 8+ed25519.SignatureSize), t)
	return append(sig, sg...), nil
}

// twWitness is torchwood's internal/witness.Witness, its log and key
// tables in a map.
type twWitness struct {
	s    *twCosignatureSigner
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
	c, err := twParseCheckpoint(n.Text)
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
	v := newTWVerifier(name, priv.Public().(ed25519.PublicKey))
	w := &twWitness{s: &twCosignatureSigner{v: v, key: priv}, logs: map[string]*twLog{}}
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

// TestAuditdLogToTorchwoodWitness: auditd as a log submits its
// checkpoints to torchwood's witness, which checks the consistency proofs
// auditd sends with x/mod's tlog; the cosignatures auditd then serves
// verify with torchwood's cosignature verifier.
func TestAuditdLogToTorchwoodWitness(t *testing.T) {
	store, key := ledgertest.OpenKey(t, ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond)))
	l, err := store.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	tw, ts := newTWWitness(t, "torchwood.example/witness")
	tw.logs[l.Origin()] = &twLog{keys: []note.Verifier{key.Verifier}} // witnessctl add-log, add-key
	vkey := tw.s.v.String()
	v, err := witness.NewVerifier(vkey) // auditd reads torchwood's vkey
	if err != nil {
		t.Fatal(err)
	}
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
	for _, n := range []int{1, 255, 300, 1024} { // sizes 1, 256, 556, 1580: proofs across tiles
		cp := appendN(t, l, n)
		for size := <-cosigned; size < cp.Size; size = <-cosigned {
		}
		signed := sub.Cosigned("payments", l.Checkpoint())
		if _, err := note.Open(signed, note.VerifierList(newTWVerifier(tw.s.v.name, tw.s.v.key))); err != nil {
			t.Fatalf("size %d: torchwood's verifier rejects the served cosignature: %v\n%s", cp.Size, err, signed)
		}
		tw.mu.Lock()
		got := tw.logs[l.Origin()].size
		tw.mu.Unlock()
		if got != int64(l.Checkpoint().Size) {
			t.Fatalf("torchwood's witness holds size %d, want %d", got, l.Checkpoint().Size)
		}
	}
}

// TestAuditdWitnessVerifiedByTorchwood: auditd as a witness; torchwood's
// verifier, built from the public key alone, accepts its cosignatures, and
// torchwood's witness accepts the same requests auditd's does.
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
	// torchwood's verifier from the vkey's public key bytes only.
	parts := strings.Split(vkey, "+")
	raw, _ := base64.StdEncoding.DecodeString(parts[2])
	twv := newTWVerifier(parts[0], ed25519.PublicKey(raw[1:]))
	if twv.String() != vkey {
		t.Fatalf("torchwood encodes the verifier key as %s, auditd as %s", twv.String(), vkey)
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
		if _, err := note.Open(append(append([]byte(nil), cp.Note...), lines...), note.VerifierList(twv)); err != nil {
			t.Fatalf("torchwood's verifier rejects auditd's cosignature %q: %v", lines, err)
		}
		old = cp.Size
	}
}

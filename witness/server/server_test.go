package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/witness"
)

// grow appends n entries (ids prefix-i) to log name in s and returns the
// checkpoint that covers them.
func grow(t testing.TB, s *ledger.Store, name, prefix string, n int) (*ledger.Log, *ledger.SignedCheckpoint) {
	t.Helper()
	l, err := s.CreateLog(name)
	if err != nil {
		t.Fatal(err)
	}
	es := make([]ledger.Entry, n)
	for i := range es {
		es[i] = ledger.Entry{ID: fmt.Sprintf("%s-%d", prefix, l.Size()+uint64(i)), Payload: []byte(prefix)}
	}
	if _, err := l.Append(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	cp, err := l.WaitCheckpoint(context.Background(), l.Size())
	if err != nil {
		t.Fatal(err)
	}
	return l, cp
}

func fastLedger() ledgertest.Option {
	return ledgertest.WithLedger(ledger.WithCheckpointInterval(time.Millisecond))
}

type fixture struct {
	srv      *Server
	ts       *httptest.Server
	vkey     note.Verifier
	logKey   ledgertest.Key
	log      *ledger.Log
	store    *ledger.Store
	logStore *ledger.Store
	dir      string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	f.logStore, f.logKey = ledgertest.OpenKey(t, fastLedger())
	f.log, _ = grow(t, f.logStore, "payments", "a", 5)
	f.store = ledgertest.Open(t, ledgertest.WithDir(f.dir))
	f.start(t)
	return f
}

func (f *fixture) start(t testing.TB) {
	t.Helper()
	skey, vkey, err := witness.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	cosigner, _ := witness.ParseKey(skey)
	f.vkey, _ = witness.NewVerifier(vkey)
	b, err := f.store.Bucket("witness")
	if err != nil {
		t.Fatal(err)
	}
	f.srv, err = New(b, cosigner, []Log{{Origin: f.log.Origin(), Verifier: f.logKey.Verifier}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/add-checkpoint", f.srv)
	f.ts = httptest.NewServer(mux)
	t.Cleanup(f.ts.Close)
}

func (f *fixture) post(t *testing.T, body []byte) (int, string, string) {
	t.Helper()
	resp, err := http.Post(f.ts.URL+"/add-checkpoint", "text/plain", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func req(old uint64, proof []merkle.Hash, cp []byte) []byte {
	return (&witness.Request{OldSize: old, Proof: proof, Checkpoint: cp}).Marshal()
}

func (f *fixture) state(t *testing.T) (uint64, merkle.Hash) {
	t.Helper()
	size, root, err := f.srv.State(f.log.Origin())
	if err != nil {
		t.Fatal(err)
	}
	return size, root
}

// TestAddCheckpoint: a log's first checkpoint, then its growth with a
// consistency proof, each cosigned with a cosignature that verifies; the
// state survives a restart of the witness's store.
func TestAddCheckpoint(t *testing.T) {
	f := newFixture(t)
	cp5 := f.log.Checkpoint()
	code, _, body := f.post(t, req(0, nil, cp5.Note))
	if code != http.StatusOK {
		t.Fatalf("first add-checkpoint: %d %s", code, body)
	}
	if _, err := note.Open(append(append([]byte(nil), cp5.Note...), body...), note.VerifierList(f.vkey)); err != nil {
		t.Fatalf("cosignature %q does not verify: %v", body, err)
	}
	if size, root := f.state(t); size != 5 || root != cp5.Root {
		t.Fatalf("state %d %s, want 5 %s", size, root, cp5.Root)
	}
	_, cp9 := grow(t, f.logStore, "payments", "a", 4)
	proof, err := f.log.ConsistencyProof(5, cp9.Size)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := f.post(t, req(5, proof, cp9.Note)); code != http.StatusOK {
		t.Fatalf("5 -> %d: %d %s", cp9.Size, code, body)
	}
	// The same checkpoint again (a log that lost the cosignature) is
	// cosigned again, without changing anything.
	if code, _, body := f.post(t, req(cp9.Size, nil, cp9.Note)); code != http.StatusOK {
		t.Fatalf("same checkpoint again: %d %s", code, body)
	}
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	f.store = ledgertest.Open(t, ledgertest.WithDir(f.dir))
	f.start(t)
	if size, root := f.state(t); size != cp9.Size || root != cp9.Root {
		t.Fatalf("after reopen: state %d %s, want %d %s", size, root, cp9.Size, cp9.Root)
	}
}

// TestAddCheckpointBadInput: each bad request gets the status
// c2sp.org/tlog-witness prescribes and leaves the state as it was.
func TestAddCheckpointBadInput(t *testing.T) {
	f := newFixture(t)
	cp5 := f.log.Checkpoint()
	if code, _, body := f.post(t, req(0, nil, cp5.Note)); code != http.StatusOK {
		t.Fatalf("first add-checkpoint: %d %s", code, body)
	}
	logStore := f.logStore
	_, cp9 := grow(t, logStore, "payments", "a", 4)
	proof, err := f.log.ConsistencyProof(5, 9)
	if err != nil {
		t.Fatal(err)
	}
	// The same origin and key, other entries: a fork of the log.
	forkStore := ledgertest.Open(t, ledgertest.WithKey(f.logKey), fastLedger())
	forkLog, fork9 := grow(t, forkStore, "payments", "b", 9)
	forkProof, _ := forkLog.ConsistencyProof(5, 9)
	_, fork5 := grow(t, ledgertest.Open(t, ledgertest.WithKey(f.logKey), fastLedger()), "payments", "b", 5)
	// Signed by another key of the same name: not the log's.
	otherStore := ledgertest.Open(t, ledgertest.WithKeyName(ledgertest.DefaultKeyName), fastLedger())
	_, other9 := grow(t, otherStore, "payments", "a", 9)
	// A log the witness does not know.
	_, unknown := grow(t, logStore, "orders", "a", 3)
	// A checkpoint of size 3 with the log's key and origin.
	_, cp3 := grow(t, ledgertest.Open(t, ledgertest.WithKey(f.logKey), fastLedger()), "payments", "a", 3)
	tampered := append([]merkle.Hash(nil), proof...)
	tampered[0][0] ^= 1
	for _, tc := range []struct {
		name string
		body []byte
		code int
		resp string
	}{
		{"bad signature", req(5, proof, other9.Note), http.StatusForbidden, ""},
		{"unknown origin", req(0, nil, unknown.Note), http.StatusNotFound, ""},
		{"proof from size 0", req(0, proof, cp9.Note), http.StatusConflict, "5\n"},
		{"proof that does not verify", req(5, tampered, cp9.Note), http.StatusUnprocessableEntity, ""},
		{"proof of another tree", req(5, forkProof, fork9.Note), http.StatusUnprocessableEntity, ""},
		{"no proof", req(5, nil, cp9.Note), http.StatusUnprocessableEntity, ""},
		{"same size, other root", req(5, nil, fork5.Note), http.StatusConflict, "5\n"},
		{"same size, other root, with a proof", req(5, proof, fork5.Note), http.StatusConflict, "5\n"},
		{"size below the known one", req(0, nil, cp3.Note), http.StatusConflict, "5\n"},
		{"old size below the known one", req(3, proof, cp9.Note), http.StatusConflict, "5\n"},
		{"old size above the known one", req(7, nil, cp9.Note), http.StatusConflict, "5\n"},
		{"old size above the checkpoint's", req(5, nil, cp3.Note), http.StatusBadRequest, ""},
		{"malformed: no empty line", []byte("old 5\n" + string(cp9.Note)), http.StatusBadRequest, ""},
		{"malformed: proof line", []byte("old 5\nxyz\n\n" + string(cp9.Note)), http.StatusBadRequest, ""},
		{"malformed: not a note", []byte("old 5\n\n" + f.log.Origin() + "\nnot a checkpoint\n"), http.StatusForbidden, ""},
	} {
		code, ctype, body := f.post(t, tc.body)
		if code != tc.code {
			t.Errorf("%s: status %d (%s), want %d", tc.name, code, strings.TrimSpace(body), tc.code)
		}
		if tc.code == http.StatusConflict && (body != tc.resp || ctype != "text/x.tlog.size") {
			t.Errorf("%s: 409 body %q type %q, want %q text/x.tlog.size", tc.name, body, ctype, tc.resp)
		}
		if size, root := f.state(t); size != 5 || root != cp5.Root {
			t.Errorf("%s changed the state: %d %s", tc.name, size, root)
		}
	}
	if code, _, body := f.post(t, req(5, proof, cp9.Note)); code != http.StatusOK {
		t.Fatalf("the good request after them: %d %s", code, body)
	}
}

// TestAddCheckpointFirstNeedsNoProof: the first checkpoint of a log (old
// 0) comes without a proof; one with proof lines is refused (422) and the
// witness still knows nothing of the log.
func TestAddCheckpointFirstNeedsNoProof(t *testing.T) {
	f := newFixture(t)
	cp5 := f.log.Checkpoint()
	bogus := []merkle.Hash{merkle.LeafHash([]byte("x"))}
	if code, _, body := f.post(t, req(0, bogus, cp5.Note)); code != http.StatusUnprocessableEntity {
		t.Errorf("old 0 with a proof: %d %s, want 422", code, body)
	}
	if size, root := f.state(t); size != 0 || root != (merkle.Hash{}) {
		t.Errorf("state %d %s, want none", size, root)
	}
}

// TestAddCheckpointSameSizeOtherRoot: a checkpoint of the size the witness
// holds (past 1024) with another root is a 409 with that size
// (c2sp.org/tlog-witness), not a 422, with a proof or without; the state
// stays, and the checkpoint it holds is still cosigned again.
func TestAddCheckpointSameSizeOtherRoot(t *testing.T) {
	f := newFixture(t)
	_, cp := grow(t, f.logStore, "payments", "a", 1025)
	if cp.Size != 1030 {
		t.Fatalf("log size %d, want 1030", cp.Size)
	}
	if code, _, body := f.post(t, req(0, nil, cp.Note)); code != http.StatusOK {
		t.Fatalf("first add-checkpoint: %d %s", code, body)
	}
	forkLog, fork := grow(t, ledgertest.Open(t, ledgertest.WithKey(f.logKey), fastLedger()), "payments", "b", 1030)
	if fork.Size != cp.Size || fork.Root == cp.Root {
		t.Fatalf("fork %d %s, want size %d and another root", fork.Size, fork.Root, cp.Size)
	}
	forkProof, err := forkLog.ConsistencyProof(1000, 1030)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{req(cp.Size, nil, fork.Note), req(cp.Size, forkProof, fork.Note)} {
		code, ctype, resp := f.post(t, body)
		if code != http.StatusConflict || resp != "1030\n" || ctype != "text/x.tlog.size" {
			t.Errorf("same size, other root: %d %q %q, want 409 \"1030\\n\" text/x.tlog.size", code, resp, ctype)
		}
		if size, root := f.state(t); size != cp.Size || root != cp.Root {
			t.Errorf("state %d %s, want %d %s", size, root, cp.Size, cp.Root)
		}
	}
	var conflict *ConflictError
	if _, err := f.srv.AddCheckpoint(req(cp.Size, nil, fork.Note)); !errors.As(err, &conflict) || !conflict.OtherRoot || conflict.Known != cp.Size {
		t.Errorf("AddCheckpoint: %v, want a *ConflictError with OtherRoot and Known %d", err, cp.Size)
	}
	if code, _, body := f.post(t, req(cp.Size, nil, cp.Note)); code != http.StatusOK {
		t.Errorf("the held checkpoint again: %d %s", code, body)
	}
}

// TestAddCheckpointEmptyTree: a checkpoint of size 0 must carry the root of
// the empty tree (SHA-256 of ""); with any other root it is refused (400)
// and the witness holds nothing, whatever state it is in. The real one is
// cosigned, and the log grows from it past 1024 without a proof.
func TestAddCheckpointEmptyTree(t *testing.T) {
	f := newFixture(t)
	sign := func(root merkle.Hash) []byte {
		b, err := merkle.Checkpoint{Origin: f.log.Origin(), Size: 0, Root: root}.Sign(f.logKey.Signer)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, root := range []merkle.Hash{{}, merkle.LeafHash(nil), f.log.Checkpoint().Root} {
		if code, _, body := f.post(t, req(0, nil, sign(root))); code != http.StatusBadRequest {
			t.Errorf("size 0, root %s: %d %s, want 400", root, code, body)
		}
		if size, root := f.state(t); size != 0 || root != (merkle.Hash{}) {
			t.Fatalf("state %d %s, want none", size, root)
		}
	}
	if code, _, body := f.post(t, req(0, nil, sign(merkle.EmptyRoot()))); code != http.StatusOK {
		t.Fatalf("size 0 with the empty root: %d %s", code, body)
	}
	if size, root := f.state(t); size != 0 || root != merkle.EmptyRoot() {
		t.Fatalf("state %d %s, want 0 and the empty root", size, root)
	}
	if code, _, body := f.post(t, req(0, nil, sign(merkle.LeafHash(nil)))); code != http.StatusBadRequest {
		t.Errorf("size 0 with another root after the empty one: %d %s, want 400", code, body)
	}
	_, cp := grow(t, f.logStore, "payments", "a", 1020)
	if code, _, body := f.post(t, req(0, nil, cp.Note)); code != http.StatusOK {
		t.Fatalf("0 -> %d: %d %s", cp.Size, code, body)
	}
	if code, _, body := f.post(t, req(0, nil, sign(merkle.LeafHash(nil)))); code != http.StatusBadRequest {
		t.Errorf("size 0 with another root after %d: %d %s, want 400", cp.Size, code, body)
	}
	if size, root := f.state(t); size != cp.Size || root != cp.Root {
		t.Errorf("state %d %s, want %d %s", size, root, cp.Size, cp.Root)
	}
}

// corruptLine returns the signature line with the last bit of its signature
// flipped (its key hash kept).
func corruptLine(t *testing.T, line string) string {
	t.Helper()
	name, b64, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(line, "\u2014 "), "\n"), " ")
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(sig) < 5 {
		t.Fatalf("not a signature line: %q", line)
	}
	sig[len(sig)-1] ^= 1
	return "\u2014 " + name + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
}

// TestAddCheckpointBadLineOfLogKey: a checkpoint with a good signature line
// of the log's key and a second one of the same key that does not verify is
// refused (403, c2sp.org/signed-note); a garbage line of an unknown key is
// ignored.
func TestAddCheckpointBadLineOfLogKey(t *testing.T) {
	f := newFixture(t)
	_, cp := grow(t, f.logStore, "payments", "a", 1025)
	i := bytes.LastIndex(cp.Note, []byte("\n\n"))
	good := string(cp.Note[i+2:])
	bad := corruptLine(t, good)
	unknown := "\u2014 other.example " + base64.StdEncoding.EncodeToString([]byte("1234 not a signature")) + "\n"
	if code, _, body := f.post(t, req(0, nil, append(bytes.Clone(cp.Note), bad...))); code != http.StatusForbidden {
		t.Errorf("good line, then a bad one of the log's key: %d %s, want 403", code, body)
	}
	if size, _ := f.state(t); size != 0 {
		t.Fatalf("the refused checkpoint set the state to size %d", size)
	}
	code, _, body := f.post(t, req(0, nil, append(bytes.Clone(cp.Note), unknown...)))
	if code != http.StatusOK {
		t.Fatalf("an unknown key's garbage line: %d %s, want 200", code, body)
	}
	if _, err := note.Open(append(bytes.Clone(cp.Note), body...), note.VerifierList(f.vkey)); err != nil {
		t.Errorf("cosignature %q does not verify: %v", body, err)
	}
}

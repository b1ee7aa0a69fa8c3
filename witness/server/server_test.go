package server

import (
	"context"
	"crypto/rand"
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
		{"same size, other root", req(5, nil, fork5.Note), http.StatusUnprocessableEntity, ""},
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

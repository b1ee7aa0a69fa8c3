package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/ledgertest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

const keyName = "client-test.example"

// testServer is a real api.Server over a real ledger, on loopback.
type testServer struct {
	store *ledger.Store
	key   ledgertest.Key
	url   string
}

// newServer serves a fresh ledger; wrap, if not nil, stands between the
// client and the real server (to make a server that lies).
func newServer(t *testing.T, wrap func(real http.Handler) http.Handler) *testServer {
	t.Helper()
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(keyName),
		ledgertest.WithLedger(ledger.WithCheckpointInterval(0)))
	var h http.Handler = api.New(store, key.VKey, api.Options{Logger: slog.New(slog.DiscardHandler)})
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testServer{store: store, key: key, url: srv.URL}
}

func (s *testServer) client() *client.Client { return client.New(s.url, s.key.Verifier) }

// testEntry is entry i: every optional field varies with i.
func testEntry(i int) ledger.Entry {
	e := ledger.Entry{ID: fmt.Sprintf("ev-%d", i), Time: time.Unix(1_700_000_000+int64(i), 0).UTC()}
	switch i % 4 {
	case 0:
		e.Payload, e.PayloadJSON = []byte(fmt.Sprintf(`{"n":%d,"s":"x"}`, i)), true
		e.HasKey, e.Key = true, []byte(fmt.Sprintf("k%d", i%7))
	case 1:
		e.Payload = []byte{0, 0xff, byte(i), '\n'}
		e.HasKey, e.Key = true, []byte{0xfe, byte(i)} // not UTF-8: sent as key_base64
	case 2:
		e.Payload = []byte(fmt.Sprintf("text %d", i))
		e.Source = &merkle.Source{Topic: "orders", Partition: 3, Offset: int64(i)}
		e.Headers = []merkle.Header{{Key: "h", Value: []byte{byte(i)}}}
	case 3:
		e.Time = time.Time{} // stamped on arrival
		e.Payload = []byte("{}")
		e.PayloadJSON = true
	}
	return e
}

// fill appends n entries to log in batches and waits for the checkpoint.
func (s *testServer) fill(t *testing.T, log string, n int) *ledger.Log {
	t.Helper()
	l, err := s.store.CreateLog(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for from := int(l.Size()); from < n; from += 100 {
		var es []ledger.Entry
		for i := from; i < min(n, from+100); i++ {
			es = append(es, testEntry(i))
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.WaitCheckpoint(ctx, uint64(n)); err != nil {
		t.Fatal(err)
	}
	return l
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCheckpoint(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	l := s.fill(t, "orders", 300)
	cp, note, err := s.client().Checkpoint(ctx(t), "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := l.Checkpoint()
	if cp.Size != 300 || cp.Root != want.Root || cp.Origin != keyName+"/orders" || !bytes.Equal(note, want.Note) {
		t.Errorf("Checkpoint = %+v, want size 300 root %s origin %s/orders", cp, want.Root, keyName)
	}
	// Another key with the same name does not verify it.
	other := ledgertest.NewKey(t, keyName)
	if _, _, err := client.New(s.url, other.Verifier).Checkpoint(ctx(t), "orders"); !errors.Is(err, client.ErrVerification) {
		t.Errorf("Checkpoint under another key = %v, want ErrVerification", err)
	}
	// A checkpoint of one log is not one of another.
	if _, err := s.client().OpenCheckpoint(note, "payments"); !errors.Is(err, client.ErrVerification) {
		t.Errorf("OpenCheckpoint for the wrong log = %v, want ErrVerification", err)
	}
}

// TestEntryDecode: every entry's fields rebuild the leaf the ledger
// committed, with the exact payload bytes.
func TestEntryDecode(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	l := s.fill(t, "orders", 12)
	c := s.client()
	for i := range 12 {
		e, err := c.Entry(ctx(t), "orders", uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		leaf, payload, h, err := e.Decode("orders")
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		rec, err := l.Entry(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if h != rec.LeafHash || !bytes.Equal(payload, rec.Payload) || leaf.ID != rec.Leaf.ID ||
			!bytes.Equal(leaf.Key, rec.Leaf.Key) || leaf.HasKey != rec.Leaf.HasKey || leaf.Time != rec.Leaf.Time ||
			leaf.TimeAssigned != rec.Leaf.TimeAssigned {
			t.Errorf("entry %d decodes to %+v %q %s; ledger has %+v %q %s", i, leaf, payload, h, rec.Leaf, rec.Payload, rec.LeafHash)
		}
		if i%4 == 2 && (leaf.Source == nil || *leaf.Source != *rec.Leaf.Source || len(leaf.Headers) != 1) {
			t.Errorf("entry %d: source %v headers %v, want %v %v", i, leaf.Source, leaf.Headers, rec.Leaf.Source, rec.Leaf.Headers)
		}
		byID, err := c.EntryByID(ctx(t), "orders", rec.Leaf.ID)
		if err != nil || byID.Index != uint64(i) || byID.LeafHash != h {
			t.Errorf("EntryByID(%q) = %+v, %v", rec.Leaf.ID, byID, err)
		}
	}
}

// TestEntries reads a range across a tile boundary and checks each entry's
// index and leaf.
func TestEntries(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	l := s.fill(t, "orders", 300)
	es, err := s.client().Entries(ctx(t), "orders", 250, 270)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 20 {
		t.Fatalf("Entries(250, 270) returned %d entries", len(es))
	}
	for i, e := range es {
		rec, _ := l.Entry(250 + uint64(i))
		if h, err := e.RecomputeLeaf("orders"); err != nil || h != rec.LeafHash {
			t.Errorf("entry %d: RecomputeLeaf = %s, %v; want %s", e.Index, h, err, rec.LeafHash)
		}
	}
	// The server stops at its tree size.
	if es, err := s.client().Entries(ctx(t), "orders", 290, 400); err != nil || len(es) != 10 {
		t.Errorf("Entries(290, 400) = %d entries, %v; want 10", len(es), err)
	}
}

// TestProofs proves every entry of a tree past one tile and the
// consistency of checkpoints at sizes across tile boundaries.
func TestProofs(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	c := s.client()
	var cps []merkle.Checkpoint
	for _, size := range []int{1, 255, 256, 257, 520} {
		s.fill(t, "orders", size)
		cp, _, err := c.Checkpoint(ctx(t), "orders")
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, cp)
	}
	last := cps[len(cps)-1]
	for i := uint64(0); i < last.Size; i += 37 {
		e, err := c.Entry(ctx(t), "orders", i)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ProveEntry(ctx(t), "orders", e, last); err != nil {
			t.Errorf("ProveEntry(%d, size %d): %v", i, last.Size, err)
		}
	}
	for i, older := range cps {
		for _, newer := range cps[i:] {
			if err := c.ProveConsistency(ctx(t), "orders", older, newer); err != nil {
				t.Errorf("ProveConsistency(%d, %d): %v", older.Size, newer.Size, err)
			}
		}
	}
	if err := c.ProveConsistency(ctx(t), "orders", last, cps[0]); !errors.Is(err, client.ErrVerification) {
		t.Errorf("ProveConsistency backwards = %v, want ErrVerification", err)
	}
	fork := cps[1]
	fork.Root[0] ^= 1
	if err := c.ProveConsistency(ctx(t), "orders", fork, last); !errors.Is(err, client.ErrVerification) {
		t.Errorf("ProveConsistency from a forged root = %v, want ErrVerification", err)
	}
	if err := c.ProveConsistency(ctx(t), "orders", fork, cps[1]); !errors.Is(err, client.ErrVerification) {
		t.Errorf("two roots at one size = %v, want ErrVerification", err)
	}
	// An entry past the checkpoint is not proved.
	e, _ := c.Entry(ctx(t), "orders", 300)
	if err := c.ProveEntry(ctx(t), "orders", e, cps[2]); err == nil {
		t.Error("ProveEntry of entry 300 in a checkpoint of size 256 succeeded")
	}
}

// TestTile: the tiles match the ledger's leaf hashes and tree; a tile the
// server does not hold is ErrNotFound.
func TestTile(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	l := s.fill(t, "orders", 300)
	c := s.client()
	full, err := c.Tile(ctx(t), "orders", 0, 0, 256)
	if err != nil {
		t.Fatal(err)
	}
	partial, err := c.Tile(ctx(t), "orders", 0, 1, 44)
	if err != nil {
		t.Fatal(err)
	}
	leaves := append(full, partial...)
	for i, h := range leaves {
		rec, _ := l.Entry(uint64(i))
		if h != rec.LeafHash {
			t.Fatalf("tile hash %d = %s, leaf hash %s", i, h, rec.LeafHash)
		}
	}
	top, err := c.Tile(ctx(t), "orders", 1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	root256, err := l.RootAt(256)
	if err != nil {
		t.Fatal(err)
	}
	if top[0] != root256 {
		t.Errorf("level-1 tile hash %s, root of the first 256 leaves %s", top[0], root256)
	}
	if _, err := c.Tile(ctx(t), "orders", 0, 5, 256); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a tile beyond the tree = %v, want ErrNotFound", err)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	s.fill(t, "orders", 3)
	c := s.client()
	for name, err := range map[string]error{
		"unknown id":           second(c.EntryByID(ctx(t), "orders", "no-such-id")),
		"unknown log":          second(c.Entry(ctx(t), "payments", 0)),
		"checkpoint of no log": third(c.Checkpoint(ctx(t), "payments")),
	} {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
	// A 400 (out of range) is an error, not ErrNotFound.
	for name, err := range map[string]error{
		"entry beyond the tree": second(c.Entry(ctx(t), "orders", 3)),
		"inclusion of 5 in 3":   second(c.InclusionProof(ctx(t), "orders", 5, 3)),
	} {
		if err == nil || errors.Is(err, client.ErrNotFound) {
			t.Errorf("%s: %v, want an error that is not ErrNotFound", name, err)
		}
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// TestLogsPaging lists more logs than fit in one page of the server.
func TestLogsPaging(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1,001 logs")
	}
	t.Parallel()
	s := newServer(t, nil)
	var want []string
	for i := range 1001 {
		name := fmt.Sprintf("log-%04d", i)
		l, err := s.store.CreateLog(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx(t), []ledger.Entry{testEntry(0)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	got, err := s.client().Logs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Logs returned %d names (first %v), want %d", len(got), got[:min(3, len(got))], len(want))
	}
}

// rewrite is a server that lies: it passes requests whose path contains
// match to the real server and changes the body of the answer.
func rewrite(match string, change func(body []byte) []byte) func(http.Handler) http.Handler {
	return func(real http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.URL.Path, match) {
				real.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			real.ServeHTTP(rec, r)
			body, _ := io.ReadAll(rec.Result().Body)
			for k, v := range rec.Header() {
				if k != "Content-Length" {
					w.Header()[k] = v
				}
			}
			w.WriteHeader(rec.Code)
			w.Write(change(body))
		})
	}
}

// editJSON decodes body into a map (or a list of maps under key), lets f
// change it, and encodes it again.
func editJSON(f func(m map[string]any)) func([]byte) []byte {
	return func(body []byte) []byte {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return body
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
}

func flipBase64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	b[len(b)-1] ^= 1
	return base64.StdEncoding.EncodeToString(b)
}

// TestLyingServer: each lie of a server is caught as ErrVerification.
func TestLyingServer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		match string
		lie   func([]byte) []byte
		check func(t *testing.T, c *client.Client, honest *client.Client) error
	}{
		{"checkpoint root changed", "/checkpoint", func(b []byte) []byte {
			lines := strings.SplitN(string(b), "\n", 4)
			lines[2] = flipBase64(lines[2])
			return []byte(strings.Join(lines, "\n"))
		}, func(t *testing.T, c, _ *client.Client) error {
			_, _, err := c.Checkpoint(ctx(t), "orders")
			return err
		}},
		{"payload changed", "/entries/", editJSON(func(m map[string]any) {
			m["payload_base64"] = flipBase64(m["payload_base64"].(string))
		}), func(t *testing.T, c, _ *client.Client) error {
			e, err := c.Entry(ctx(t), "orders", 5)
			if err != nil {
				return err
			}
			_, _, _, err = e.Decode("orders")
			return err
		}},
		{"id changed, leaf kept", "/entries/", editJSON(func(m map[string]any) {
			m["id"] = "someone-else"
		}), func(t *testing.T, c, _ *client.Client) error {
			e, err := c.Entry(ctx(t), "orders", 5)
			if err != nil {
				return err
			}
			_, err = e.RecomputeLeaf("orders")
			return err
		}},
		{"leaf and hash rewritten to match a changed payload", "/entries/", editJSON(func(m map[string]any) {
			// A consistent forgery: the fields, leaf bytes and leaf hash
			// agree, so only the inclusion proof can catch it.
			var e client.Entry
			b, _ := json.Marshal(m)
			json.Unmarshal(b, &e)
			leaf, _, _, err := e.Decode("orders")
			if err != nil {
				panic(err)
			}
			forged := []byte("forged")
			leaf.PayloadSHA256 = sha256.Sum256(forged)
			lb, _ := leaf.MarshalBinary()
			m["payload_base64"] = base64.StdEncoding.EncodeToString(forged)
			m["leaf"] = base64.StdEncoding.EncodeToString(lb)
			m["leaf_hash"] = merkle.LeafHash(lb).String()
		}), func(t *testing.T, c, honest *client.Client) error {
			cp, _, err := honest.Checkpoint(ctx(t), "orders")
			if err != nil {
				t.Fatal(err)
			}
			e, err := c.Entry(ctx(t), "orders", 5)
			if err != nil {
				return err
			}
			if _, err := e.RecomputeLeaf("orders"); err != nil {
				t.Fatalf("the forgery is not self-consistent: %v", err)
			}
			return c.ProveEntry(ctx(t), "orders", e, cp)
		}},
		{"inclusion proof changed", "/proof/inclusion", editJSON(func(m map[string]any) {
			hs := m["hashes"].([]any)
			hs[0] = flipBase64(hs[0].(string))
		}), func(t *testing.T, c, honest *client.Client) error {
			cp, _, _ := honest.Checkpoint(ctx(t), "orders")
			e, err := c.Entry(ctx(t), "orders", 5)
			if err != nil {
				return err
			}
			return c.ProveEntry(ctx(t), "orders", e, cp)
		}},
		{"consistency proof changed", "/proof/consistency", editJSON(func(m map[string]any) {
			hs := m["hashes"].([]any)
			hs[len(hs)-1] = flipBase64(hs[len(hs)-1].(string))
		}), func(t *testing.T, c, honest *client.Client) error {
			newer, _, _ := honest.Checkpoint(ctx(t), "orders")
			older := merkle.Checkpoint{Origin: newer.Origin, Size: 100}
			var err error
			if older.Root, err = rootAt(honest, t, 100); err != nil {
				t.Fatal(err)
			}
			return c.ProveConsistency(ctx(t), "orders", older, newer)
		}},
		{"entries out of order", "/entries", func(b []byte) []byte {
			var out struct {
				Entries []json.RawMessage `json:"entries"`
			}
			if json.Unmarshal(b, &out) != nil || len(out.Entries) < 2 {
				return b
			}
			out.Entries[0], out.Entries[1] = out.Entries[1], out.Entries[0]
			nb, _ := json.Marshal(out)
			return nb
		}, func(t *testing.T, c, _ *client.Client) error {
			_, err := c.Entries(ctx(t), "orders", 10, 20)
			return err
		}},
		{"short tile", "/tile/", func(b []byte) []byte { return b[:len(b)-1] }, func(t *testing.T, c, _ *client.Client) error {
			_, err := c.Tile(ctx(t), "orders", 0, 0, 200)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, rewrite(tc.match, tc.lie))
			s.fill(t, "orders", 200)
			honestSrv := httptest.NewServer(api.New(s.store, s.key.VKey, api.Options{Logger: slog.New(slog.DiscardHandler)}))
			t.Cleanup(honestSrv.Close)
			honest := client.New(honestSrv.URL, s.key.Verifier)
			// The same check against the honest server passes: the lie is
			// what fails it.
			if err := tc.check(t, honest, honest); err != nil {
				t.Fatalf("against the honest server: %v", err)
			}
			if err := tc.check(t, s.client(), honest); !errors.Is(err, client.ErrVerification) {
				t.Errorf("against the lying server: %v, want ErrVerification", err)
			}
		})
	}
}

// rootAt computes the root of the first size leaves from the honest
// server's tiles and entries.
func rootAt(c *client.Client, t *testing.T, size uint64) (merkle.Hash, error) {
	es, err := c.Entries(ctx(t), "orders", 0, size)
	if err != nil {
		return merkle.Hash{}, err
	}
	rng := merkle.NewRange()
	for _, e := range es {
		if err := rng.Append(e.LeafHash, nil); err != nil {
			return merkle.Hash{}, err
		}
	}
	return rng.Root()
}

// TestToken: a server whose reads need a token refuses a client without it
// and serves one made WithToken.
func TestToken(t *testing.T) {
	t.Parallel()
	store, key := ledgertest.OpenKey(t, ledgertest.WithKeyName(keyName), ledgertest.WithLedger(ledger.WithCheckpointInterval(0)))
	srv := httptest.NewServer(api.New(store, key.VKey, api.Options{Auth: api.Tokens{Read: "secret"}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	s := &testServer{store: store, key: key, url: srv.URL}
	s.fill(t, "orders", 3)
	if _, _, err := client.New(srv.URL, key.Verifier).Checkpoint(ctx(t), "orders"); err == nil {
		t.Error("a client without the token read a protected server")
	}
	cp, _, err := client.New(srv.URL, key.Verifier, client.WithToken("secret")).Checkpoint(ctx(t), "orders")
	if err != nil || cp.Size != 3 {
		t.Errorf("with the token: %+v, %v", cp, err)
	}
}

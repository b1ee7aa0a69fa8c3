package rederive_test

// The remote ledger against a real auditd API server on loopback, over a
// real ledger of 5,000 entries: ranges that do not start at 0 nor align
// with a page, and a tampering proxy in front of the server.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/api"
	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/internal/bundletest"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/fold"
)

const remoteTestEntries = 5000

// remoteTestServer is an auditd API server over a ledger whose log
// "payments" holds remoteTestEntries entries, all signed.
type remoteTestServer struct {
	url      string
	log      *ledger.Log
	verifier note.Verifier
}

func newRemoteTestServer(t testing.TB) *remoteTestServer {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "rederive-remote-test.example")
	if err != nil {
		t.Fatal(err)
	}
	return newKeyedTestServer(t, skey, vkey, remoteTestEntries, `{"n":%d}`)
}

// newKeyedTestServer is newRemoteTestServer with the key given, n
// entries, and payloads made by fmt.Appendf(nil, payload, i).
func newKeyedTestServer(t testing.TB, skey, vkey string, n int, payload string) *remoteTestServer {
	t.Helper()
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	quiet := slog.New(slog.DiscardHandler)
	st, err := ledger.Open(t.TempDir(), signer, verifier, ledger.WithCheckpointInterval(5*time.Millisecond), ledger.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the ledger: %v", err)
		}
	})
	l, err := st.CreateLog("payments")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Unix(1_700_000_000, 0)
	for start := 0; start < n; start += 1000 {
		var es []ledger.Entry
		for i := start; i < min(start+1000, n); i++ {
			es = append(es, ledger.Entry{ID: fmt.Sprintf("e-%d", i), HasKey: true, Key: fmt.Appendf(nil, "k%d", i%11),
				Time: t0.Add(time.Duration(i) * time.Second), Payload: fmt.Appendf(nil, payload, i), PayloadJSON: true})
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.WaitCheckpoint(ctx, uint64(n)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(st, vkey, api.Options{Logger: quiet}))
	t.Cleanup(srv.Close)
	return &remoteTestServer{url: srv.URL, log: l, verifier: verifier}
}

// ledger returns a remote ledger reading url (the server or a proxy) and
// its pin of payments.
func (s *remoteTestServer) ledger(t *testing.T, url string, page uint64) (*rederive.RemoteLedger, fold.Pin) {
	t.Helper()
	rl := &rederive.RemoteLedger{Client: client.New(url, s.verifier), PageSize: page}
	pin, ok, err := rl.Pin(context.Background(), "payments")
	if err != nil || !ok || pin.Size != remoteTestEntries {
		t.Fatalf("pin: %+v, %v, %v", pin, ok, err)
	}
	return rl, pin
}

// read reads [from, to) and returns the records (copied) and the error.
func readRange(r fold.LogReader, from, to uint64) ([]ledger.Record, error) {
	var out []ledger.Record
	err := r.Entries(context.Background(), from, to, func(rec *ledger.Record) error {
		c := *rec
		c.Payload = bytes.Clone(rec.Payload)
		out = append(out, c)
		return nil
	})
	return out, err
}

func TestRemoteLogRanges(t *testing.T) {
	s := newRemoteTestServer(t)
	ranges := [][2]uint64{
		{0, remoteTestEntries}, {1500, 2600}, {0, 1}, {1, 2}, {4999, 5000}, {1023, 1025}, {1024, 2048},
		{3000, 3001}, {1, 4999}, {2600, 2600}, {4096, 5000}, {255, 257},
	}
	for _, page := range []uint64{0, 333, 1} {
		rl, pin := s.ledger(t, s.url, page)
		rl.PageProofs = page == 333 // both ways of proving pages
		r := rl.Reader("payments", pin)
		var wg sync.WaitGroup
		for _, rg := range ranges {
			from, to := rg[0], rg[1]
			if page == 1 && to-from > 300 || page == 333 && to-from > 1200 {
				continue // a request per few entries: only the short ranges
			}
			wg.Go(func() { // concurrently, as the fold engine reads
				got, err := readRange(r, from, to)
				if err != nil {
					t.Errorf("page %d: Entries(%d, %d): %v", page, from, to, err)
					return
				}
				if uint64(len(got)) != to-from {
					t.Errorf("page %d: Entries(%d, %d) gave %d records", page, from, to, len(got))
					return
				}
				i := 0
				err = s.log.ScanEntries(context.Background(), from, to, func(want *ledger.Record) error {
					g := &got[i]
					i++
					if g.Index != want.Index || g.LeafHash != want.LeafHash || g.Leaf.ID != want.Leaf.ID ||
						!bytes.Equal(g.Leaf.Key, want.Leaf.Key) || g.Leaf.Time != want.Leaf.Time || !bytes.Equal(g.Payload, want.Payload) {
						return fmt.Errorf("record %d: got %d %s %q, want %d %s %q", i-1, g.Index, g.Leaf.ID, g.Payload, want.Index, want.Leaf.ID, want.Payload)
					}
					return nil
				})
				if err != nil {
					t.Errorf("page %d: Entries(%d, %d): %v", page, from, to, err)
				}
			})
		}
		wg.Wait()
	}
	rl, pin := s.ledger(t, s.url, 0)
	r := rl.Reader("payments", pin)
	for _, rg := range [][2]uint64{{0, remoteTestEntries + 1}, {10, 5}, {remoteTestEntries, remoteTestEntries + 3}} {
		if _, err := readRange(r, rg[0], rg[1]); err == nil {
			t.Errorf("Entries(%d, %d) beyond the pin of %d: no error", rg[0], rg[1], pin.Size)
		}
	}
}

// tamperingProxy serves GETs from upstream, passing the body of a 200
// answer through rewrite (when it returns non-nil).
func tamperingProxy(t *testing.T, upstream string, rewrite func(r *http.Request, body []byte) []byte) string {
	t.Helper()
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bundletest.ServeCombined(w, r, self) { // the lies of the parts, combined
			return
		}
		resp, err := http.Get(upstream + r.URL.RequestURI())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if resp.StatusCode == http.StatusOK {
			if b := rewrite(r, body); b != nil {
				body = b
			}
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	}))
	self = srv.URL
	t.Cleanup(srv.Close)
	return srv.URL
}

// forgeRanges rewrites entry index in every entries-range answer: a new
// payload, with the leaf and its hash recomputed, so it checks out alone.
func forgeRanges(t *testing.T, index uint64) func(r *http.Request, body []byte) []byte {
	return func(r *http.Request, body []byte) []byte {
		if r.URL.Path != "/v1/logs/payments/entries" {
			return nil
		}
		var out struct {
			Entries []client.Entry `json:"entries"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Errorf("proxy: %v", err)
			return nil
		}
		for i := range out.Entries {
			e := &out.Entries[i]
			if e.Index != index {
				continue
			}
			leaf, _, _, err := e.Decode("payments")
			if err != nil {
				t.Errorf("proxy: %v", err)
				return nil
			}
			p := []byte(`{"n":-1}`)
			leaf.PayloadSHA256 = sha256.Sum256(p)
			lb, _ := leaf.MarshalBinary()
			ps := base64.StdEncoding.EncodeToString(p)
			e.PayloadBase64, e.Payload = &ps, nil
			e.Leaf, e.LeafHash = base64.StdEncoding.EncodeToString(lb), merkle.LeafHash(lb)
			e.PayloadSHA256 = base64.StdEncoding.EncodeToString(leaf.PayloadSHA256[:])
			if _, err := e.RecomputeLeaf("payments"); err != nil {
				t.Errorf("proxy: forged entry: %v", err)
			}
		}
		b, _ := json.Marshal(out)
		return b
	}
}

func TestRemoteLogTampered(t *testing.T) {
	s := newRemoteTestServer(t)

	for _, proofs := range []bool{false, true} {
		t.Run(fmt.Sprintf("entry rewritten with its leaf, page proofs %v", proofs), func(t *testing.T) {
			url := tamperingProxy(t, s.url, forgeRanges(t, 2000))
			rl, pin := s.ledger(t, url, 0)
			rl.PageProofs = proofs
			rl.JSONPages = true // the forgery is in the JSON listing
			r := rl.Reader("payments", pin)
			for _, rg := range [][2]uint64{{1500, 2600}, {2000, 2001}, {1999, 2001}, {1024, 2048}, {2000, 3100}} {
				got, err := readRange(r, rg[0], rg[1])
				if !errors.Is(err, rederive.ErrVerification) {
					t.Errorf("Entries(%d, %d) over a forged entry 2000: %v, want rederive.ErrVerification", rg[0], rg[1], err)
				}
				// Nothing of the page that holds 2000 reached fn.
				for _, rec := range got {
					if rec.Index >= 2000-(2000-rg[0])%1024 && rec.Index <= 2000 {
						t.Errorf("Entries(%d, %d): record %d of the forged page handed out", rg[0], rg[1], rec.Index)
						break
					}
				}
			}
			// Ranges without it are proven and read.
			for _, rg := range [][2]uint64{{0, 1000}, {2001, 2600}, {1500, 1999}, {4000, 5000}} {
				if got, err := readRange(r, rg[0], rg[1]); err != nil || uint64(len(got)) != rg[1]-rg[0] {
					t.Errorf("Entries(%d, %d) away from the forged entry: %d records, %v", rg[0], rg[1], len(got), err)
				}
			}
		})
	}

	for _, proof := range []string{"inclusion", "consistency"} {
		t.Run("lying "+proof+" proof", func(t *testing.T) {
			url := tamperingProxy(t, s.url, func(r *http.Request, body []byte) []byte {
				if r.URL.Path != "/v1/logs/payments/proof/"+proof {
					return nil
				}
				var p struct {
					Hashes []merkle.Hash `json:"hashes"`
				}
				if err := json.Unmarshal(body, &p); err != nil {
					t.Errorf("proxy: %v", err)
					return nil
				}
				for i := range p.Hashes {
					p.Hashes[i][0] ^= 1
				}
				b, _ := json.Marshal(p)
				return b
			})
			rl, pin := s.ledger(t, url, 0)
			rl.PageProofs = true // the tiles need no proofs
			r := rl.Reader("payments", pin)
			if _, err := readRange(r, 1500, 2600); !errors.Is(err, rederive.ErrVerification) {
				t.Errorf("Entries(1500, 2600) with a lying %s proof: %v, want rederive.ErrVerification", proof, err)
			}
			// Each needs only the proofs that do not lie.
			for _, rg := range map[string][][2]uint64{"inclusion": {{0, 1024}, {0, 1}}, "consistency": {{4000, 5000}, {4999, 5000}}}[proof] {
				if _, err := readRange(r, rg[0], rg[1]); err != nil {
					t.Errorf("Entries(%d, %d) with a lying %s proof: %v", rg[0], rg[1], proof, err)
				}
			}
		})
	}

	t.Run("proof of another shape", func(t *testing.T) {
		// One hash short: a verification failure, not a crash.
		url := tamperingProxy(t, s.url, func(r *http.Request, body []byte) []byte {
			if r.URL.Path != "/v1/logs/payments/proof/inclusion" {
				return nil
			}
			var p struct {
				Hashes []merkle.Hash `json:"hashes"`
			}
			if err := json.Unmarshal(body, &p); err != nil || len(p.Hashes) == 0 {
				t.Errorf("proxy: %v", err)
				return nil
			}
			p.Hashes = p.Hashes[1:]
			b, _ := json.Marshal(p)
			return b
		})
		rl, pin := s.ledger(t, url, 0)
		rl.PageProofs = true
		if _, err := readRange(rl.Reader("payments", pin), 1500, 5000); !errors.Is(err, rederive.ErrVerification) {
			t.Errorf("Entries(1500, 5000) with a short inclusion proof: %v, want rederive.ErrVerification", err)
		}
	})
}

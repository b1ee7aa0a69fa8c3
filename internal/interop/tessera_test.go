package interop_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	tapi "github.com/transparency-dev/tessera/api"
	"github.com/transparency-dev/tessera/client"
	"github.com/transparency-dev/tessera/fsck"

	"github.com/auditd/auditd/merkle"
)

// interopSize is the size of the logs these tests read: past a full level-1
// tile (65,536 entries), so every tile level has a full and a partial tile,
// and the last entry bundle is partial (70,003 = 273*256 + 115).
const interopSize = 70003

func shortSize() int {
	if testing.Short() {
		return 5*256 + 17
	}
	return interopSize
}

func tesseraFetcher(t testing.TB, prefix string) *client.HTTPFetcher {
	t.Helper()
	u, err := url.Parse(prefix)
	if err != nil {
		t.Fatal(err)
	}
	f, err := client.NewHTTPFetcher(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTesseraClient: tessera's client verifies auditd's checkpoint, builds
// inclusion and consistency proofs from its hash tiles that verify, and
// reads every entry of the log through client.EntryBundles, each entry
// hashing to the leaf the ledger holds.
func TestTesseraClient(t *testing.T) {
	t.Parallel()
	n := shortSize()
	s := serveLog(t, n)
	ctx := context.Background()
	f := tesseraFetcher(t, s.prefix)

	cp, _, _, err := client.FetchCheckpoint(ctx, f.ReadCheckpoint, s.verifier, s.origin)
	if err != nil {
		t.Fatalf("tessera FetchCheckpoint: %v", err)
	}
	if cp.Size != uint64(n) || cp.Origin != s.origin {
		t.Fatalf("checkpoint %q size %d, want %q %d", cp.Origin, cp.Size, s.origin, n)
	}
	lbs, hs := s.leaves(t)
	if root := s.log.Checkpoint().Root; !bytes.Equal(cp.Hash, root[:]) {
		t.Fatalf("tessera read root %x, the ledger has %s", cp.Hash, root)
	}

	pb, err := client.NewProofBuilder(ctx, cp.Size, f.ReadTile)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{0, 1, 255, 256, 257, uint64(n) / 2, uint64(n) - 116, uint64(n) - 1} {
		p, err := pb.InclusionProof(ctx, i)
		if err != nil {
			t.Fatalf("tessera inclusion proof %d: %v", i, err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, i, cp.Size, hs[i][:], p, cp.Hash); err != nil {
			t.Errorf("inclusion of %d in %d: %v", i, cp.Size, err)
		}
	}
	for _, m := range []uint64{1, 255, 256, 257, uint64(n) / 3, uint64(n) - 1} {
		p, err := pb.ConsistencyProof(ctx, m, cp.Size)
		if err != nil {
			t.Fatalf("tessera consistency proof %d..%d: %v", m, cp.Size, err)
		}
		old, err := s.log.RootAt(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, m, cp.Size, p, old[:], cp.Hash); err != nil {
			t.Errorf("consistency %d..%d: %v", m, cp.Size, err)
		}
	}

	size := func(context.Context) (uint64, error) { return cp.Size, nil }
	next, partial := uint64(0), false
	for b, err := range client.EntryBundles(ctx, 4, size, f.ReadEntryBundle, 0, cp.Size) {
		if err != nil {
			t.Fatalf("tessera EntryBundles at %d: %v", next, err)
		}
		var eb tapi.EntryBundle
		if err := eb.UnmarshalText(b.Data); err != nil {
			t.Fatalf("bundle %d: %v", b.RangeInfo.Index, err)
		}
		ri := b.RangeInfo
		partial = partial || ri.Partial != 0
		for _, e := range eb.Entries[ri.First : ri.First+ri.N] {
			if merkle.LeafHash(e) != hs[next] || !bytes.Equal(e, lbs[next]) {
				t.Fatalf("bundle %d: entry %d is not the leaf the ledger holds", ri.Index, next)
			}
			next++
		}
	}
	if next != uint64(n) || !partial {
		t.Errorf("EntryBundles read %d entries (partial bundle read: %v), want %d", next, partial, n)
	}
}

// TestTesseraFsck runs tessera's fsck against auditd over HTTP: it fetches
// every entry bundle, rebuilds every hash tile and the root from them and
// compares them with the tiles and checkpoint auditd serves. Behind a proxy
// that flips one byte of one bundle, fsck must fail.
func TestTesseraFsck(t *testing.T) {
	t.Parallel()
	s := serveLog(t, shortSize())
	ctx := context.Background()
	if err := runFsck(ctx, t, s, s.prefix); err != nil {
		t.Fatalf("fsck against auditd: %v", err)
	}

	tamper := tamperingProxy(t, s)
	err := runFsck(ctx, t, s, tamper)
	if err == nil {
		t.Fatal("fsck passed a log whose entry bundle 3 has a flipped byte")
	}
	if msg := err.Error(); !strings.Contains(msg, "tile/0/003") {
		t.Errorf("fsck failed, but not on the tampered bundle's tile: %.200s", msg)
	}
}

// runFsck is tessera's cmd/fsck without its flags and terminal UI: the same
// fsck.New, with the same RFC 6962 bundle hasher.
func runFsck(ctx context.Context, t testing.TB, s *served, prefix string) error {
	f := fsck.New(s.origin, s.verifier, tesseraFetcher(t, prefix), func(bundle []byte) ([][]byte, error) {
		var eb tapi.EntryBundle
		if err := eb.UnmarshalText(bundle); err != nil {
			return nil, err
		}
		hs := make([][]byte, 0, len(eb.Entries))
		for _, e := range eb.Entries {
			hs = append(hs, rfc6962.DefaultHasher.HashLeaf(e))
		}
		return hs, nil
	}, fsck.Opts{N: 4})
	return f.Check(ctx)
}

// tamperingProxy serves s through a proxy that flips one byte of entry
// bundle 3 and returns the log's URL prefix through it.
func tamperingProxy(t testing.TB, s *served) string {
	t.Helper()
	tamper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := http.Get(s.http.URL + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if strings.HasSuffix(r.URL.Path, "/tile/entries/003") && len(b) > 100 {
			b[100] ^= 0x01
		}
		w.WriteHeader(res.StatusCode)
		w.Write(b)
	}))
	t.Cleanup(tamper.Close)
	return tamper.URL + "/v1/logs/interop/"
}

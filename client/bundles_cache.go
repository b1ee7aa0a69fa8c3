package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/auditd/auditd/merkle"
)

// BundleCache is a local directory of full bundles (entry bundle and
// payload bundle) a Tree proved, so that a later reader of the same log
// fetches only what is new. Nothing in it is trusted: a cached bundle is
// used only once it is proven against the new tree exactly as a fetched
// one is (Tree.Bundle), and one that does not check out (a flipped byte,
// a truncated file) is fetched again and replaced. Each log's directory
// also keeps the checkpoint the cache was last proven under; a server
// whose new checkpoint is not consistent with it fails (UseCache).
//
// Layout, under the directory:
//
//	v1/<hex SHA-256 of the log's origin>/origin       the origin line, for people
//	v1/<...>/checkpoint                               "<size>\n<root base64>\n"
//	v1/<...>/<N>.bundle                               full bundle N: u32 length of the
//	                                                  entry bundle, the entry bundle,
//	                                                  the payload bundle
//
// Partial bundles and bundles with a payload the server does not hold are
// never cached. Files are written to a temporary name and renamed.
//
// A BundleCache is safe for concurrent use, and several processes may
// share one directory.
type BundleCache struct {
	dir string
	// hits, misses and bad count bundles read from the cache, not found
	// in it, and found but failing their proof (then refetched).
	hits, misses, bad atomic.Int64
}

// OpenBundleCache opens (creating it) the bundle cache in dir.
func OpenBundleCache(dir string) (*BundleCache, error) {
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o755); err != nil {
		return nil, fmt.Errorf("client: bundle cache: %w", err)
	}
	return &BundleCache{dir: dir}, nil
}

// CacheStats are the counts of a BundleCache's reads.
type CacheStats struct {
	// Hits are bundles read from the cache and proven; Misses bundles not
	// in it; Bad bundles in it that failed their proof and were fetched
	// again.
	Hits, Misses, Bad int64
}

// Stats returns the cache's counts since it was opened.
func (bc *BundleCache) Stats() CacheStats {
	return CacheStats{Hits: bc.hits.Load(), Misses: bc.misses.Load(), Bad: bc.bad.Load()}
}

// logDir is the directory of the log of origin.
func (bc *BundleCache) logDir(origin string) string {
	sum := sha256.Sum256([]byte(origin))
	return filepath.Join(bc.dir, "v1", hex.EncodeToString(sum[:]))
}

// UseCache makes t read its full bundles from bc first and keep the ones
// it fetches there. If the cache holds a checkpoint of t's log no larger
// than t's, t's server must prove t's checkpoint consistent with it: one
// that cannot (a forked or rewritten log) fails with ErrVerification. The
// cache then records t's checkpoint. (A cached checkpoint larger than t's,
// a server behind the one the cache was filled from, is kept as it is; the
// cached bundles are still proven one by one against t.)
func (t *Tree) UseCache(ctx context.Context, bc *BundleCache) error {
	origin := t.c.Origin(t.log)
	dir := bc.logDir(origin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("client: bundle cache: %w", err)
	}
	old, ok, err := readCachedCheckpoint(filepath.Join(dir, "checkpoint"))
	if err != nil {
		return err
	}
	if ok && old.Size > t.size {
		t.cache, t.cacheDir = bc, dir
		return nil
	}
	if ok && old.Size > 0 {
		var proof []merkle.Hash
		if old.Size < t.size {
			if proof, err = t.c.ConsistencyProof(ctx, t.log, old.Size, t.size); err != nil {
				return err
			}
		}
		if err := merkle.VerifyConsistency(old.Size, t.size, proof, old.Root, t.root); err != nil {
			return verifyErr("the checkpoint of %s of size %d is not consistent with the one of size %d the bundle cache %s was proven under: %v",
				t.log, t.size, old.Size, bc.dir, err)
		}
	}
	if err := writeFileAtomic(filepath.Join(dir, "origin"), []byte(origin+"\n")); err != nil {
		return err
	}
	cp := fmt.Sprintf("%d\n%s\n", t.size, t.root)
	if err := writeFileAtomic(filepath.Join(dir, "checkpoint"), []byte(cp)); err != nil {
		return err
	}
	t.cache, t.cacheDir = bc, dir
	return nil
}

// readCachedCheckpoint reads a cache's checkpoint file. A file that does
// not parse is as good as none: the cache is then proven bundle by bundle.
func readCachedCheckpoint(path string) (merkle.Checkpoint, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return merkle.Checkpoint{}, false, nil
	}
	if err != nil {
		return merkle.Checkpoint{}, false, fmt.Errorf("client: bundle cache: %w", err)
	}
	size, root, ok := strings.Cut(strings.TrimSpace(string(b)), "\n")
	n, err := strconv.ParseUint(size, 10, 64)
	if !ok || err != nil {
		return merkle.Checkpoint{}, false, nil
	}
	h, err := merkle.ParseHash(strings.TrimSpace(root))
	if err != nil {
		return merkle.Checkpoint{}, false, nil
	}
	return merkle.Checkpoint{Size: n, Root: h}, true, nil
}

func (t *Tree) bundleFile(n uint64) string {
	return filepath.Join(t.cacheDir, strconv.FormatUint(n, 10)+".bundle")
}

// read returns full bundle n from the cache, proven against t, or nil if
// it is not there or does not check out.
func (bc *BundleCache) read(ctx context.Context, t *Tree, n uint64) *Bundle {
	b, err := os.ReadFile(t.bundleFile(n))
	if err != nil {
		bc.misses.Add(1)
		return nil
	}
	bundle, err := func() (*Bundle, error) {
		leaves, payloads, pruned, err := splitCombined(b, t.log, n, tileWidth)
		if err != nil {
			return nil, err
		}
		// Watermark 0: a cached bundle holds every payload not oversize.
		return t.prove(ctx, n, leaves, payloads, pruned, 0)
	}()
	if err != nil {
		bc.bad.Add(1)
		return nil
	}
	bc.hits.Add(1)
	return bundle
}

// write keeps full bundle n, proven, in the cache. A failure to write
// only costs a later fetch.
func (bc *BundleCache) write(t *Tree, n uint64, entries, payloads []byte) {
	b := make([]byte, 0, 4+len(entries)+len(payloads))
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	b = append(b, entries...)
	b = append(b, payloads...)
	bc.writeFile(t, n, b)
}

// writeFile keeps full bundle n, proven, as the file b (the layout of a
// combined bundle) in the cache.
func (bc *BundleCache) writeFile(t *Tree, n uint64, b []byte) {
	_ = writeFileAtomic(t.bundleFile(n), b)
}

// writeFileAtomic writes b to path through a temporary file renamed over
// it, so a reader never sees half a file.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("client: bundle cache: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("client: bundle cache: %w", err)
	}
	return nil
}

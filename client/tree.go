package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/auditd/auditd/merkle"
)

// tileWidth is the hashes in a full C2SP tlog-tiles tile, and the entries
// in a full entry bundle.
const tileWidth = 256

// bundleLevel is the tree level of a full bundle's subtree: the level-1
// tiles hold the hashes of the log's subtrees at this level.
const bundleLevel = 8

// Tree is a log's tree at a verified checkpoint, as far as a reader of all
// its leaves needs it: the root of every full 256-entry bundle, read from
// the server's level-1 tiles, and the leaf hashes of the last partial
// bundle, all proven together against the checkpoint's root. With them a
// run of leaf hashes is checked without a proof per request: a full
// bundle's leaves must hash to its root, and the leaves of a bundle read
// only in part must be those of its level-0 tile, itself checked against
// the bundle's root (fetched once, then kept).
//
// A Tree is safe for concurrent use.
type Tree struct {
	c    *Client
	log  string
	size uint64
	root merkle.Hash
	// roots are the subtree hashes of the full bundles [0, size/256).
	roots []merkle.Hash
	mu    sync.Mutex
	// leaves are level-0 tiles read so far, checked, by bundle: the last
	// partial bundle's from the start, others as ranges need them.
	leaves map[uint64][]merkle.Hash
	// cache, if set (UseCache), keeps proven full bundles in cacheDir.
	cache    *BundleCache
	cacheDir string
}

// maxTileFetches bounds the tile requests a Tree keeps in flight.
const maxTileFetches = 8

// Tree fetches the tiles of log at the checkpoint cp, which the caller has
// verified, and proves them against its root: a server that serves a tile
// other than the log's tree at cp gets ErrVerification. A server that
// serves no tiles gets an error wrapping ErrNotFound.
func (c *Client) Tree(ctx context.Context, log string, cp merkle.Checkpoint) (*Tree, error) {
	t := &Tree{c: c, log: log, size: cp.Size, root: cp.Root, leaves: map[uint64][]merkle.Hash{}}
	full := cp.Size / tileWidth // full bundles, and level-8 hashes
	t.roots = make([]merkle.Hash, full)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, maxTileFetches)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for n := uint64(0); n*tileWidth < full; n++ {
		width := int(min(full-n*tileWidth, tileWidth))
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			hs, err := c.Tile(ctx, log, 1, n, width)
			if err != nil {
				fail(err)
				return
			}
			copy(t.roots[n*tileWidth:], hs)
		})
	}
	var last []merkle.Hash
	if r := int(cp.Size % tileWidth); r > 0 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			hs, err := c.Tile(ctx, log, 0, full, r)
			if err != nil {
				fail(err)
				return
			}
			last = hs
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	rng := merkle.NewRange()
	for _, h := range t.roots {
		if err := rng.AppendSubtree(bundleLevel, h, nil); err != nil {
			return nil, err
		}
	}
	for _, h := range last {
		if err := rng.Append(h, nil); err != nil {
			return nil, err
		}
	}
	root, err := rng.Root()
	if err != nil {
		return nil, err
	}
	if root != cp.Root {
		return nil, verifyErr("tiles of %s hash to root %s, the checkpoint of size %d says %s", log, root, cp.Size, cp.Root)
	}
	if last != nil {
		t.leaves[full] = last
	}
	return t, nil
}

// Size is the size of the tree.
func (t *Tree) Size() uint64 { return t.size }

// Check proves that hashes are the leaf hashes of entries [start,
// start+len(hashes)) of the tree, or returns an error wrapping
// ErrVerification. It fetches the level-0 tile of a bundle the run covers
// only in part, once.
func (t *Tree) Check(ctx context.Context, start uint64, hashes []merkle.Hash) error {
	end := start + uint64(len(hashes))
	if end < start || end > t.size {
		return fmt.Errorf("client: leaves [%d, %d) of %s beyond the tree of size %d", start, end, t.log, t.size)
	}
	for i := start; i < end; {
		b := i / tileWidth
		bEnd := min((b+1)*tileWidth, t.size)
		n := min(bEnd, end) - i
		got := hashes[i-start : i-start+n]
		if i == b*tileWidth && n == tileWidth {
			if r := subtreeRoot(got); r != t.roots[b] {
				return verifyErr("entries [%d, %d) of %s hash to %s, the checkpoint's tree says %s", i, i+n, t.log, r, t.roots[b])
			}
		} else {
			want, err := t.bundleLeaves(ctx, b)
			if err != nil {
				return err
			}
			off := i - b*tileWidth
			for j := range got {
				if got[j] != want[off+uint64(j)] {
					return verifyErr("entry %d of %s has leaf hash %s, the checkpoint's tree says %s", i+uint64(j), t.log, got[j], want[off+uint64(j)])
				}
			}
		}
		i += n
	}
	return nil
}

// bundleLeaves returns the checked leaf hashes of bundle b.
func (t *Tree) bundleLeaves(ctx context.Context, b uint64) ([]merkle.Hash, error) {
	t.mu.Lock()
	hs, ok := t.leaves[b]
	t.mu.Unlock()
	if ok {
		return hs, nil
	}
	// Only full bundles are fetched here: the partial last one is read
	// and proven with the roots.
	hs, err := t.c.Tile(ctx, t.log, 0, b, tileWidth)
	if err != nil {
		return nil, err
	}
	if r := subtreeRoot(hs); r != t.roots[b] {
		return nil, verifyErr("level-0 tile %d of %s hashes to %s, the checkpoint's tree says %s", b, t.log, r, t.roots[b])
	}
	t.mu.Lock()
	t.leaves[b] = hs
	t.mu.Unlock()
	return hs, nil
}

// subtreeRoot is the root of the perfect subtree whose leaf hashes are hs
// (a power of two of them).
func subtreeRoot(hs []merkle.Hash) merkle.Hash {
	level := make([]merkle.Hash, len(hs)/2)
	for i := range level {
		level[i] = merkle.NodeHash(hs[2*i], hs[2*i+1])
	}
	for len(level) > 1 {
		for i := range len(level) / 2 {
			level[i] = merkle.NodeHash(level[2*i], level[2*i+1])
		}
		level = level[:len(level)/2]
	}
	return level[0]
}

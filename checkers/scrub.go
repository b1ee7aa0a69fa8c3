package checkers

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"golang.org/x/mod/sumdb/note"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Tile geometry (merkle.TileHeight, merkle.TileWidth), with the level-4
// hashes a local source keeps after each tile's base hashes (see
// LogSource.Tile).
const (
	tileHeight = merkle.TileHeight
	tileWidth  = merkle.TileWidth
	midLevel   = 4
	midStride  = 1 << midLevel
)

// Scrub is the ledger scrub: for each log it re-reads every entry and
// payload, recomputes payload digests and leaf hashes, rebuilds the tree
// from the leaves and compares every stored tile (base and level-4 hashes),
// the recorded root and the root of every stored signed checkpoint with
// the rebuilt tree. What a local source finds in its own storage on the way
// (ledger.RawLog.Check: entries and index chunks beyond the tree, payloads
// pruned outside the policy, ingested index chunks that differ from their
// entries) is reported with the rest.
//
// Where a leaf recomputed from its entry differs from the tree's, the
// stored level-4 hash over its group of 16 tells which side is wrong: the
// entry (kind leaf_mismatch, with its index) or the tile (tile_mismatch).
// The rest of the pass goes on with the side that agrees with the tree, so
// one bad value is one finding and not a cascade up to every root. A
// missing or undecodable entry is reported and its leaf taken from the
// tile; only when the tile lacks it too is it unknown, and the hashes over
// it are not judged.
type Scrub struct {
	src Source
	v   note.Verifier
}

var _ Checker = (*Scrub)(nil)

// NewScrub returns a scrub of the logs of src whose checkpoints are signed
// by v's key (origin "<key name>/<log>").
func NewScrub(src Source, v note.Verifier) *Scrub { return &Scrub{src: src, v: v} }

// Name implements Checker.
func (s *Scrub) Name() string { return "scrub" }

// Run implements Checker.
func (s *Scrub) Run(ctx context.Context, p Progress) error {
	logs, err := s.src.Logs(ctx)
	if err != nil {
		return fmt.Errorf("scrub: list logs: %w", err)
	}
	for _, name := range logs {
		if err := s.RunLog(ctx, name, p); err != nil {
			return err
		}
	}
	return nil
}

// RunLog scrubs one log.
func (s *Scrub) RunLog(ctx context.Context, name string, p Progress) error {
	ls, err := s.src.Log(ctx, name)
	if err != nil {
		return fmt.Errorf("scrub: %s: %w", name, err)
	}
	defer ls.Close()
	w := &logScrub{ctx: ctx, p: p, src: ls, log: name, size: ls.Size(), rng: merkle.NewRange()}
	if err := w.run(s.v); err != nil {
		return fmt.Errorf("scrub: %s: %w", name, err)
	}
	return nil
}

type cpRoot struct {
	size uint64
	root merkle.Hash
}

// logScrub is the state of one log's pass.
type logScrub struct {
	ctx  context.Context
	p    Progress
	src  LogSource
	log  string
	size uint64
	err  error // a source failure that stops the pass

	rng *merkle.Range
	// levels[t] holds the rebuilt hashes of the current tile at tile level
	// t: base (tree level 8t) and mid (8t+4).
	levels []*tileBuf
	cps    []cpRoot
	nextCP int
	// unknown lists the leaves with no known hash, in order.
	unknown []uint64

	// The current level-0 tile's leaves.
	tile0  uint64
	leaves [tileWidth]merkle.Hash
	known  [tileWidth]bool
	fill   int
	next   uint64 // the index the next entry must have
}

type tileBuf struct {
	n         uint64
	base, mid []merkle.Hash
}

func (w *logScrub) found(f Finding) {
	f.Log = w.log
	w.p.Found(f)
}

func (w *logScrub) run(v note.Verifier) error {
	raw, err := w.src.Checkpoints(w.ctx)
	if err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	origin := v.Name() + "/" + w.log
	for _, c := range raw {
		cp, err := merkle.OpenCheckpoint(c.Note, v, origin)
		if err != nil || cp.Size != c.Size {
			continue // the checkpoint audit reports it
		}
		if cp.Size > w.size {
			w.found(Finding{Checkpoint: At(cp.Size), Kind: ledger.IntegrityRollback,
				Detail: fmt.Sprintf("signed checkpoint of size %d is beyond the stored tree of size %d", cp.Size, w.size)})
			continue
		}
		w.cps = append(w.cps, cpRoot{cp.Size, cp.Root})
	}
	sort.Slice(w.cps, func(i, j int) bool { return w.cps[i].size < w.cps[j].size })
	w.checkRoots() // a checkpoint of the empty tree
	storage, err := w.src.Leaves(w.ctx, func(batch []ledger.ScannedEntry) error {
		for i := range batch {
			if err := w.add(&batch[i]); err != nil {
				return err
			}
		}
		return w.p.Checked(w.ctx, len(batch))
	})
	for _, f := range storage {
		w.found(f)
	}
	if err != nil {
		return err
	}
	if w.err != nil {
		return w.err
	}
	if w.next != w.size {
		return fmt.Errorf("source gave %d entries, the tree holds %d", w.next, w.size)
	}
	if w.fill > 0 {
		w.flushTile0()
	}
	if w.err != nil {
		return w.err
	}
	w.finish()
	return w.err
}

func (w *logScrub) add(e *ledger.ScannedEntry) error {
	if e.Index != w.next {
		return fmt.Errorf("source gave entry %d where %d was due", e.Index, w.next)
	}
	w.next++
	if e.Err != nil {
		w.found(Finding{Index: At(e.Index), Kind: e.Err.Kind, Detail: e.Err.Detail})
	}
	w.leaves[w.fill], w.known[w.fill] = e.LeafHash, e.Err == nil
	w.fill++
	if w.fill == tileWidth {
		w.flushTile0()
	}
	return w.err
}

// flushTile0 checks the current level-0 tile's leaves against the stored
// tile, folds them into the tree and checks what that completes.
func (w *logScrub) flushTile0() {
	n, cnt := w.tile0, w.fill
	tile := fmt.Sprintf("0/%d", n)
	base, mid, err := w.src.Tile(w.ctx, 0, n, cnt)
	switch {
	case errors.Is(err, ErrTileMissing):
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMissing, Detail: "the tile holding these leaves is not stored"})
	case err != nil && w.ctx.Err() != nil:
		w.err = err
		return
	case err != nil:
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMismatch, Detail: err.Error()})
		base, mid = nil, nil
	case len(base) < cnt:
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMismatch,
			Detail: fmt.Sprintf("the tile holds %d hashes, the tree needs %d", len(base), cnt)})
	}
	chosen := w.leaves[:cnt]
	first := n * tileWidth
	for g := 0; g*midStride < cnt; g++ {
		lo, hi := g*midStride, min(g*midStride+midStride, cnt)
		var diff []int
		for i := lo; i < hi; i++ {
			if i < len(base) && w.known[i] && w.leaves[i] != base[i] {
				diff = append(diff, i)
			}
		}
		// Whose side does the group's stored level-4 hash take?
		tileWrong := false
		if len(diff) > 0 && hi-lo == midStride && g < len(mid) && hi <= len(base) {
			var fromBase, fromLeaves [midStride]merkle.Hash
			copy(fromBase[:], base[lo:hi])
			for i := lo; i < hi; i++ {
				fromLeaves[i-lo] = w.leaves[i]
				if !w.known[i] {
					fromLeaves[i-lo] = base[i]
				}
			}
			b, l := subtreeHash(fromBase[:]), subtreeHash(fromLeaves[:])
			tileWrong = l == mid[g] && b != mid[g]
		}
		for _, i := range diff {
			if tileWrong {
				w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMismatch, Detail: fmt.Sprintf(
					"base hash %d is %s; entry %d hashes to %s, which the tile's level-4 hash %d confirms", i, base[i], first+uint64(i), w.leaves[i], g)})
				continue
			}
			w.found(Finding{Index: At(first + uint64(i)), Tile: tile, Kind: ledger.IntegrityLeafMismatch, Detail: fmt.Sprintf(
				"the entry hashes to %s, the tree holds %s", w.leaves[i], base[i])})
			chosen[i] = base[i]
		}
		for i := lo; i < hi; i++ {
			if w.known[i] {
				continue
			}
			if i < len(base) {
				chosen[i] = base[i]
			} else {
				w.unknown = append(w.unknown, first+uint64(i))
			}
		}
	}
	if cnt == tileWidth && !w.checkpointInside(first, first+tileWidth) {
		w.foldTile(n, chosen)
	} else {
		for i := range chosen {
			if err := w.rng.Append(chosen[i], w.visit); err != nil {
				w.err = err
				return
			}
			w.checkRoots()
		}
	}
	// The level-0 tile's own level-4 hashes, now rebuilt.
	if lb := w.level(0); mid != nil {
		w.compareMid(0, n, lb.mid, mid)
	}
	w.level(0).mid = w.level(0).mid[:0]
	w.tile0++
	w.fill = 0
}

// checkpointInside reports whether a checkpoint's size falls strictly
// inside (lo, hi): its root needs the tree at a size within the tile.
func (w *logScrub) checkpointInside(lo, hi uint64) bool {
	for i := w.nextCP; i < len(w.cps) && w.cps[i].size < hi; i++ {
		if w.cps[i].size > lo {
			return true
		}
	}
	return false
}

// foldTile folds a full level-0 tile into the tree at once: its nodes up
// to the tile's root are hashed here, without a compact range append per
// leaf, and the root joins the range as one node of level 8.
func (w *logScrub) foldTile(n uint64, leaves []merkle.Hash) {
	var buf [tileWidth]merkle.Hash
	copy(buf[:], leaves)
	lb := w.level(0)
	for level, width := 1, tileWidth/2; width >= 1; level, width = level+1, width/2 {
		for i := 0; i < width; i++ {
			buf[i] = merkle.NodeHash(buf[2*i], buf[2*i+1])
		}
		if level == midLevel {
			lb.mid = append(lb.mid, buf[:width]...)
		}
	}
	root := buf[0]
	if err := w.rng.AppendSubtree(tileHeight, root, w.visit); err != nil {
		w.err = err
		return
	}
	w.checkRoots()
}

func (w *logScrub) level(t int) *tileBuf {
	for len(w.levels) <= t {
		w.levels = append(w.levels, &tileBuf{})
	}
	return w.levels[t]
}

// visit collects the rebuilt hashes that tiles store and checks each tile
// above level 0 as it completes.
func (w *logScrub) visit(id merkle.NodeID, hash merkle.Hash) {
	sub := id.Level % tileHeight
	if sub != 0 && sub != midLevel {
		return
	}
	t := int(id.Level / tileHeight)
	if t == 0 && sub == 0 {
		return // leaves: checked before folding
	}
	b := w.level(t)
	if sub == 0 {
		b.n = id.Index / tileWidth
		b.base = append(b.base, hash)
		return
	}
	b.mid = append(b.mid, hash)
	if t > 0 && len(b.mid) == midStride && len(b.base) == tileWidth {
		w.checkTile(t, b.n, b.base, b.mid)
		b.base, b.mid = b.base[:0], b.mid[:0]
	}
}

// finish checks the partial tiles at the tree's right edge and the
// recorded root.
func (w *logScrub) finish() {
	for t := 1; w.size>>(tileHeight*t) > 0; t++ {
		b := w.level(t)
		if cnt := int((w.size >> (tileHeight * t)) % tileWidth); cnt > 0 {
			w.checkTile(t, (w.size>>(tileHeight*t))/tileWidth, b.base, b.mid)
		}
	}
	if w.size == 0 || w.hasUnknownBelow(w.size) {
		return
	}
	root, err := w.rng.Root()
	if err != nil {
		w.err = err
		return
	}
	if got := w.src.Root(); root != got {
		w.found(Finding{Kind: ledger.IntegrityRootMismatch, Detail: fmt.Sprintf(
			"the log records root %s for size %d; its entries give %s", got, w.size, root)})
	}
}

// checkTile compares a rebuilt tile above level 0 with the stored one.
func (w *logScrub) checkTile(t int, n uint64, base, mid []merkle.Hash) {
	tile := fmt.Sprintf("%d/%d", t, n)
	sb, sm, err := w.src.Tile(w.ctx, uint8(t), n, len(base))
	switch {
	case errors.Is(err, ErrTileMissing):
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMissing, Detail: "a tile the tree needs is not stored"})
		return
	case err != nil && w.ctx.Err() != nil:
		w.err = err
		return
	case err != nil:
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMismatch, Detail: err.Error()})
		return
	}
	level := uint8(t * tileHeight)
	bad, firstBad := 0, -1
	for i := range base {
		if w.coversUnknown(uint64(i)+n*tileWidth, uint64(level)) {
			continue
		}
		if i >= len(sb) || sb[i] != base[i] {
			if bad++; firstBad < 0 {
				firstBad = i
			}
		}
	}
	if bad > 0 {
		stored := "none"
		if firstBad < len(sb) {
			stored = sb[firstBad].String()
		}
		w.found(Finding{Tile: tile, Kind: ledger.IntegrityTileMismatch, Detail: fmt.Sprintf(
			"%d of %d base hashes differ from the rebuilt tree, first at %d (stored %s, rebuilt %s)", bad, len(base), firstBad, stored, base[firstBad])})
	}
	if sm != nil {
		w.compareMid(t, n, mid, sm)
	}
}

// compareMid compares the rebuilt level-4 hashes of tile t/n with the
// stored ones.
func (w *logScrub) compareMid(t int, n uint64, rebuilt, stored []merkle.Hash) {
	level := uint64(t*tileHeight + midLevel)
	bad, firstBad := 0, -1
	for g := range rebuilt {
		if w.coversUnknown(n*(tileWidth/midStride)+uint64(g), level) {
			continue
		}
		if g >= len(stored) || stored[g] != rebuilt[g] {
			if bad++; firstBad < 0 {
				firstBad = g
			}
		}
	}
	if bad > 0 {
		s := "none"
		if firstBad < len(stored) {
			s = stored[firstBad].String()
		}
		w.found(Finding{Tile: fmt.Sprintf("%d/%d", t, n), Kind: ledger.IntegrityTileMismatch, Detail: fmt.Sprintf(
			"%d of %d level-4 hashes differ from the rebuilt tree, first at %d (stored %s, rebuilt %s)", bad, len(rebuilt), firstBad, s, rebuilt[firstBad])})
	}
}

// coversUnknown reports whether node index at level covers an unknown
// leaf.
func (w *logScrub) coversUnknown(index, level uint64) bool {
	if len(w.unknown) == 0 {
		return false
	}
	lo, hi := index<<level, (index+1)<<level
	i := sort.Search(len(w.unknown), func(i int) bool { return w.unknown[i] >= lo })
	return i < len(w.unknown) && w.unknown[i] < hi
}

// checkRoots compares the rebuilt root with every checkpoint at the
// current size.
func (w *logScrub) checkRoots() {
	end := w.rng.End()
	for w.nextCP < len(w.cps) && w.cps[w.nextCP].size <= end {
		c := w.cps[w.nextCP]
		w.nextCP++
		if c.size != end || w.hasUnknownBelow(end) {
			continue
		}
		root, err := w.rng.Root()
		if err != nil {
			w.err = err
			return
		}
		if root != c.root {
			w.found(Finding{Checkpoint: At(c.size), Kind: ledger.IntegrityRootMismatch, Detail: fmt.Sprintf(
				"the signed checkpoint of size %d has root %s; the entries give %s", c.size, c.root, root)})
		}
	}
}

func (w *logScrub) hasUnknownBelow(size uint64) bool {
	return len(w.unknown) > 0 && w.unknown[0] < size
}

// subtreeHash reduces a power-of-two run of hashes to the root of the
// perfect tree over them, overwriting hs.
func subtreeHash(hs []merkle.Hash) merkle.Hash {
	for n := len(hs); n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			hs[i] = merkle.NodeHash(hs[2*i], hs[2*i+1])
		}
	}
	return hs[0]
}

// FindingKinds are the kinds a scrub reports: the ledger's integrity kinds,
// the payloads pruned outside the policy and the index chunks that differ
// from their entries (found by a local source's storage checks).
func (s *Scrub) FindingKinds() []string {
	return append(append([]string{}, kinds...), ledger.IntegrityPrunedOutsidePolicy, ledger.IntegrityIndexMismatch)
}

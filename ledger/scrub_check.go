package ledger

import (
	"context"
	"fmt"

	"github.com/auditd/auditd/internal/plural"
	"github.com/auditd/auditd/merkle"
)

// Check reads the log's entries [0, Size()) as Scan does and calls fn with
// each batch, in index order: each entry's leaf hash is recomputed from its
// stored bytes, a missing or undecodable entry comes with its Err set. In
// the same pass it checks what only storage holds, which no tile API
// serves, and returns what it found there, each as an *IntegrityError
// (Index -1 when no one entry is concerned):
//
//   - an entry stored at or above Size(), or index chunks recorded or
//     stored beyond the tree (IntegrityRollback: the log's metadata went
//     back);
//   - payloads gone at or above the pruning watermark
//     (IntegrityPrunedOutsidePolicy, one finding per run of entries);
//   - every ingested id and leaf-hash index chunk within the tree, compared
//     with the keys rebuilt from its entries and its level-0 tiles
//     (IntegrityIndexMismatch). An entry that is missing, does not decode,
//     or hashes to another leaf than its tile holds is left out of the
//     comparison: the scan reports it.
//
// An error is a read failure, the end of ctx, or fn's error; the findings
// made until then are returned with it.
func (r *RawLog) Check(ctx context.Context, fn func([]ScannedEntry) error) ([]*IntegrityError, error) {
	c := &storageCheck{r: r}
	if err := c.start(); err != nil {
		return c.found, err
	}
	err := r.scan(ctx, 0, r.size, func(es []ScannedEntry) error {
		for i := range es {
			c.add(&es[i])
			if c.err != nil {
				return c.err
			}
		}
		return fn(es)
	})
	if err != nil {
		return c.found, err
	}
	c.flushPruned()
	return c.found, nil
}

// storageCheck is the state of Check's storage checks, fed the scanned
// entries in index order.
type storageCheck struct {
	r     *RawLog
	found []*IntegrityError
	err   error // a read failure that stops the pass

	// Payloads gone above the pruning watermark: the current run.
	watermark, from, n uint64

	// The ingested index chunks within the tree, and the keys of the
	// current one as rebuilt so far; tile is the current level-0 tile's
	// base hashes (nil if it is not stored or does not decode).
	chunks uint64
	keys   *chunkKeys
	tileN  uint64
	tile   []merkle.Hash
}

func (c *storageCheck) report(index int64, kind, detail string) {
	c.found = append(c.found, &IntegrityError{Log: c.r.name, Index: index, Kind: kind, Detail: detail})
}

// start runs the checks made before the scan: entries and index chunks
// beyond the tree, and reads the pruning watermark.
func (c *storageCheck) start() error {
	r, size := c.r, c.r.size
	recorded, stored, err := r.indexChunks()
	if err != nil {
		return fmt.Errorf("read index chunks: %w", err)
	}
	i, found, err := r.entryAbove(size)
	if err != nil {
		return fmt.Errorf("read entries: %w", err)
	}
	if found {
		c.report(int64(i), IntegrityRollback, fmt.Sprintf(
			"entry %d is stored, but the log records a tree of size %d: its metadata went back", i, size))
	}
	if have := size / indexChunk; recorded > have || stored > have {
		c.report(-1, IntegrityRollback, fmt.Sprintf(
			"index chunks cover %d entries (%d recorded, %d stored), but the tree holds %d: storage lost entries it had indexed",
			max(recorded, stored)*indexChunk, recorded, stored, size))
	}
	if c.chunks = min(recorded, size/indexChunk); c.chunks > 0 {
		c.keys, c.tileN = newChunkKeys(), ^uint64(0)
	}
	if c.watermark, err = r.pruneWatermark(); err != nil {
		return fmt.Errorf("read pruning watermark: %w", err)
	}
	return nil
}

// add takes the next entry.
func (c *storageCheck) add(e *ScannedEntry) {
	c.checkPruned(e)
	if e.Index >= c.chunks*indexChunk {
		return
	}
	pos := int(e.Index % indexChunk)
	if n := e.Index / tileWidth; n != c.tileN {
		c.tileN = n
		var err error
		if c.tile, _, err = c.r.Tile(0, n); err != nil {
			c.tile = nil // the scan reports the tile
		}
	}
	var tile *merkle.Hash
	if off := int(e.Index % tileWidth); off < len(c.tile) {
		tile = &c.tile[off]
	}
	switch {
	case e.Err == nil:
		c.keys.setID(pos, e.idKey)
		if tile == nil || *tile == e.LeafHash {
			c.keys.setLeaf(pos, e.LeafHash)
		}
	case tile != nil:
		c.keys.setLeaf(pos, *tile)
	}
	if pos == indexChunk-1 {
		c.checkChunk(e.Index / indexChunk)
	}
}

// checkChunk compares index chunk ch, whose keys are all in, with the one
// stored.
func (c *storageCheck) checkChunk(ch uint64) {
	fs, err := c.r.checkIndexChunk(ch, c.keys)
	if err != nil {
		c.err = fmt.Errorf("index chunk %d: %w", ch, err)
		return
	}
	for _, f := range fs {
		c.report(f.Entry, IntegrityIndexMismatch, f.Detail)
	}
	c.keys.reset()
}

// checkPruned looks at entry e in index order: an entry at or above the
// pruning watermark whose payload is gone (and that is not an oversize
// record) was pruned outside the retention policy. A pruned entry is
// otherwise checked like any other, by the leaf recomputed from its
// remaining fields and the payload hash stored in place of the payload.
func (c *storageCheck) checkPruned(e *ScannedEntry) {
	if e.Err == nil && e.pruned && e.Index >= c.watermark {
		if c.n == 0 {
			c.from = e.Index
		}
		c.n++
		return
	}
	c.flushPruned()
}

// flushPruned reports the current run of pruned entries, if any.
func (c *storageCheck) flushPruned() {
	if c.n == 0 {
		return
	}
	holds, their := "hold no payload", "their payloads were"
	if c.n == 1 {
		holds, their = "holds no payload", "its payload was"
	}
	c.report(int64(c.from), IntegrityPrunedOutsidePolicy, fmt.Sprintf(
		"%s from %d %s, but the log's pruning watermark is %d: %s deleted outside the retention policy (the leaves still match the tree)",
		plural.N(c.n, "entry", "entries"), c.from, holds, c.watermark, their))
	c.n = 0
}

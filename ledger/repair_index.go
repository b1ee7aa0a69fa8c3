package ledger

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// IndexRepair is one chunk of one index that RepairIndex found differing
// from the keys rebuilt from its entries, and what became of it.
type IndexRepair struct {
	IndexFinding
	// Repaired says the chunk was rewritten from its entries. False in a
	// dry run, and when Refused says why not.
	Repaired bool
	// Refused says why the chunk was left as it is: an entry of the chunk
	// is missing, does not decode, or does not hash to the tree's leaf, so
	// its keys cannot be rebuilt. Repair the entries first (fsck names
	// them).
	Refused string
}

// RepairIndex rebuilds the ingested index chunks of the log from its
// entries and rewrites those that differ (the scrub's index_mismatch
// findings). It first compares every chunk of both indexes with the keys
// rebuilt from its entries, as the scrub does. Then each chunk that
// differs is replaced in one synced batch: its stored keys deleted, the
// rebuilt ones written in the chunk's layout (packed, or layout 1 below the
// first packed chunk). A chunk is rebuilt only when every one of its
// 65,536 entries is stored, decodes and hashes to the leaf the tree's
// level-0 tile holds; otherwise it is left as it is and the repair says
// why. With dryRun nothing is written. progress, if set, is called with
// the entries read so far and the entries to read.
//
// The store must take no appends meanwhile (auditd repair-index opens a
// stopped daemon's store): the id filter, which rules out ids on the
// append path, learns the ids a repair restores only when the store is
// opened again.
func (l *Log) RepairIndex(ctx context.Context, dryRun bool, progress func(done, total uint64)) ([]IndexRepair, error) {
	r, err := l.Raw()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	chunks, _, err := r.indexChunks()
	if err != nil {
		return nil, err
	}
	end := min(chunks<<indexChunkBits, r.Size())
	keys := newChunkKeys()
	var (
		out     []IndexRepair
		damaged string // the chunk's first entry that cannot be rebuilt
		base    []merkle.Hash
		tileN   = ^uint64(0)
	)
	err = r.scan(ctx, 0, end, func(es []ScannedEntry) error {
		for _, e := range es {
			pos := int(e.Index % indexChunk)
			switch {
			case e.Err != nil:
				damaged = firstOf(damaged, fmt.Sprintf("entry %d: %v", e.Index, e.Err))
			default:
				if n := e.Index / tileWidth; n != tileN {
					tileN = n
					var terr error
					if base, _, terr = r.Tile(0, n); terr != nil {
						base = nil // every entry of the tile counts as damaged
					}
				}
				if len(base) <= int(e.Index%tileWidth) || base[e.Index%tileWidth] != e.LeafHash {
					damaged = firstOf(damaged, fmt.Sprintf("entry %d does not hash to the leaf its level-0 tile holds", e.Index))
				}
				keys.setID(pos, e.idKey)
				keys.setLeaf(pos, e.LeafHash)
			}
			if pos != indexChunk-1 {
				continue
			}
			c := e.Index / indexChunk
			fs, err := r.checkIndexChunk(c, keys)
			if err != nil {
				return err
			}
			for _, f := range fs {
				rep := IndexRepair{IndexFinding: f, Refused: damaged}
				if damaged == "" && !dryRun {
					if err := l.rewriteChunk(indexKind(f.Index), c, keys); err != nil {
						return fmt.Errorf("ledger: %s: rewrite %s index chunk %d: %w", l.name, f.Index, c, err)
					}
					rep.Repaired = true
				}
				out = append(out, rep)
			}
			keys.reset()
			damaged = ""
			if progress != nil {
				progress(e.Index+1, end)
			}
		}
		return nil
	})
	return out, err
}

// firstOf keeps the first reason given.
func firstOf(have, s string) string {
	if have != "" {
		return have
	}
	return s
}

// indexKind is the key kind of the index a finding names.
func indexKind(name string) byte {
	if name == "leaf-hash" {
		return kindHashIndex
	}
	return kindIDIndex
}

// rewriteChunk replaces chunk c of kind's index with the keys rebuilt in k
// (every position set), in one synced batch.
func (l *Log) rewriteChunk(kind byte, c uint64, k *chunkKeys) error {
	hs := k.id
	if kind == kindHashIndex {
		hs = k.leaf
	}
	k.exp = k.exp[:0]
	for pos, h := range hs {
		k.exp = append(k.exp, indexEntry{h, c<<indexChunkBits | uint64(pos)})
	}
	k.exp, k.tmp = sortChunkEntries(k.exp, k.tmp, k.count)
	lo, hi := chunkRange(kind, l.id, c)
	b := l.s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	set := func(key, v []byte) error { return b.Set(key, v, nil) }
	if c >= l.tail.packedFrom.Load() {
		if err := packChunk(kind, l.id, c, k.exp, set); err != nil {
			return err
		}
	} else {
		// Layout 1: a key per index key, its value the uvarint indexes
		// filed under it, in index order.
		var v []byte
		for i := 0; i < len(k.exp); {
			h := k.exp[i].h
			v = v[:0]
			for ; i < len(k.exp) && k.exp[i].h == h; i++ {
				v = binary.AppendUvarint(v, k.exp[i].index)
			}
			if err := set(chunkKey(kind, l.id, uint32(c), h), v); err != nil {
				return err
			}
		}
	}
	return b.Commit(pebble.Sync)
}

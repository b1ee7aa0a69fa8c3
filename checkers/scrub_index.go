package checkers

import (
	"fmt"

	"github.com/auditd/auditd/ledger"
)

// indexSource is what a local source adds for the index check: the
// comparison of an ingested id and leaf-hash index chunk with the keys
// rebuilt from its entries.
type indexSource interface {
	CheckIndexChunk(c uint64, k *ledger.ChunkKeys) ([]ledger.IndexFinding, error)
}

var _ indexSource = rawLogSource{}

// CheckIndexChunk implements indexSource.
func (s rawLogSource) CheckIndexChunk(c uint64, k *ledger.ChunkKeys) ([]ledger.IndexFinding, error) {
	return s.r.CheckIndexChunk(c, k)
}

// indexCheck rebuilds the index keys of the current index chunk as the
// scan goes (the entries' id keys, the tree's leaves) and, when the chunk's
// last entry is in, has the source compare them with the chunk it
// ingested. One chunk's keys are held at a time.
type indexCheck struct {
	src    indexSource
	chunks uint64 // the chunks to check: ingested and within the tree
	keys   *ledger.ChunkKeys
}

// startIndexCheck sets the check up for the recorded ingested chunks, if
// the source can compare them.
func (w *logScrub) startIndexCheck(recorded uint64) {
	is, ok := w.src.(indexSource)
	if !ok {
		return
	}
	n := min(recorded, w.size/ledger.IndexChunkEntries)
	if n == 0 {
		return
	}
	w.idx = indexCheck{src: is, chunks: n, keys: ledger.NewChunkKeys()}
}

// inIndexed reports whether entry i is in a chunk the check compares.
func (w *logScrub) inIndexed(i uint64) bool {
	return w.idx.keys != nil && i < w.idx.chunks*ledger.IndexChunkEntries
}

func (w *logScrub) indexID(e *ledger.ScannedEntry) {
	if e.Err == nil && w.inIndexed(e.Index) {
		w.idx.keys.SetID(int(e.Index%ledger.IndexChunkEntries), e.IDKey)
	}
}

// indexChunkDone compares the chunk that ends before w.next, if it ends
// there and is ingested.
func (w *logScrub) indexChunkDone() {
	if w.next%ledger.IndexChunkEntries != 0 || !w.inIndexed(w.next-1) {
		return
	}
	c := w.next/ledger.IndexChunkEntries - 1
	fs, err := w.idx.src.CheckIndexChunk(c, w.idx.keys)
	if err != nil {
		w.err = fmt.Errorf("index chunk %d: %w", c, err)
		return
	}
	for _, f := range fs {
		fd := Finding{Kind: ledger.IntegrityIndexMismatch, Detail: f.Detail}
		if f.Entry >= 0 {
			fd.Index = At(uint64(f.Entry))
		}
		w.found(fd)
	}
	w.idx.keys.Reset()
}

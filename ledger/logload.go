package ledger

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// load rebuilds the writer state and the latest checkpoint from storage.
func (l *Log) load() error {
	v, closer, err := l.s.db.Get(metaKey(l.id))
	if err != nil {
		return err
	}
	m, err := decodeMeta(v)
	closer.Close()
	if err != nil {
		return err
	}
	r := hashReader{db: l.s.db, log: l.id}
	rng, err := merkle.RangeAt(m.size, r)
	if err != nil {
		return fmt.Errorf("rebuild tree of size %d: %w", m.size, err)
	}
	root, err := rng.Root()
	if err != nil {
		return err
	}
	if root != m.root {
		return fmt.Errorf("root of the stored tiles %s does not match the recorded root %s at size %d", root, m.root, m.size)
	}
	tiles, err := l.openTiles(m.size)
	if err != nil {
		return err
	}
	l.committed.Store(&treeState{size: m.size, root: root})
	l.source.Store(nil)
	if v, closer, err := l.s.db.Get(sourceKey(l.id)); err == nil {
		src := append([]byte(nil), v...)
		closer.Close()
		l.source.Store(&src)
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("read source position: %w", err)
	}
	ids, err := l.loadIndex(m.size)
	if err != nil {
		return fmt.Errorf("rebuild the id and leaf-hash indexes: %w", err)
	}
	l.w.writer = writer{size: m.size, root: root, rng: rng, tiles: tiles, ids: ids}
	l.s.metrics.size.WithLabelValues(l.name).Set(float64(m.size))
	l.s.metrics.initLog(l.name)
	if m.size >= bigLogEntries {
		l.s.big.add(l.id)
	}
	// Last, with the state loaded: the latest stored checkpoint and the
	// checkpoint files (checkLog, which auditd fsck runs too); a log
	// refused here may still be served read-only.
	bad, err := l.admit(r)
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	return nil
}

// openTiles returns, for each level of the stored tree of size, the tile
// the writer appends to next: the partial tile read from storage (copied
// with room to grow), or an empty one.
func (l *Log) openTiles(size uint64) ([]*tileBuf, error) {
	var tiles []*tileBuf
	for lvl := 0; size>>(tileHeight*lvl) > 0; lvl++ {
		count := size >> (tileHeight * lvl)
		t := &tileBuf{level: uint8(lvl), n: count / tileWidth}
		if w := int(count % tileWidth); w > 0 {
			v, closer, err := l.s.db.Get(tileKey(l.id, uint8(lvl), t.n))
			if err != nil {
				return nil, fmt.Errorf("read tile %d/%d: %w", lvl, t.n, err)
			}
			base, mid, err := decodeTile(v)
			closer.Close()
			if err != nil {
				return nil, err
			}
			if len(base) < w {
				return nil, fmt.Errorf("tile %d/%d has %d hashes, want %d", lvl, t.n, len(base), w)
			}
			// Copies with room to grow: base and mid share one array, and
			// appending to base in place would overwrite mid.
			t.base = append(make([]merkle.Hash, 0, tileWidth), base[:w]...)
			t.mid = append(make([]merkle.Hash, 0, tileWidth/midStride), mid[:w/midStride]...)
		}
		tiles = append(tiles, t)
	}
	return tiles, nil
}

// reload restores the writer state from storage after a group commit
// Pebble refused before applying it (see restore).
// The caller holds the signer's lock.
func (a *appender) reload() error {
	l := a.l
	if !l.st.state().persisted {
		// Nothing of the log reached storage.
		a.writer = emptyWriter()
		l.committed.Store(&treeState{root: merkle.EmptyRoot()})
		l.tail.reset(0)
		return nil
	}
	if err := l.load(); err != nil {
		var ie *IntegrityError
		if errors.As(err, &ie) {
			l.s.integrity(ie)
			l.setReadOnly(ie)
		}
		return err
	}
	return nil
}

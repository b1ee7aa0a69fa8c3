package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/auditd/auditd/merkle"
)

// Leaves calls fn with each entry [from, to) in index order, as entry and
// payload bundles carry it: the leaf's encoding, recomputed from the
// stored entry and checked against the tree's level-0 tile as Entries
// checks it, its leaf hash, and the payload, nil with pruned true where the ledger no
// longer holds it (pruned after retention, or an oversize payload ledgered
// by its hash alone). It reads each entry once and copies neither: leaf
// and payload are valid only during the call. to must not exceed the
// committed size; a missing, undecodable or altered entry stops the scan
// with an *IntegrityError, an error from fn stops it with that error.
func (l *Log) Leaves(ctx context.Context, from, to uint64, fn func(index uint64, leaf []byte, hash merkle.Hash, payload []byte, pruned bool) error) error {
	if size := l.Size(); to > size || from > to {
		return fmt.Errorf("%w: entries [%d, %d), tree size %d", ErrRange, from, to, size)
	}
	if from == to {
		return nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(l.id, from), UpperBound: entryKey(l.id, to)})
	if err != nil {
		return err
	}
	defer it.Close()
	tile, base := ^uint64(0), make([]merkle.Hash, 0, tileWidth)
	want := from
	var sc leafScratch
	for ok := it.First(); ok; ok = it.Next() {
		if want&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		idx := binary.BigEndian.Uint64(k[len(k)-8:])
		if idx != want {
			return l.missingEntry(want)
		}
		v := it.Value()
		leaf, h, err := sc.leaf(l.name, v)
		if err != nil {
			return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(idx), Kind: IntegrityEntryCorrupt,
				Detail: fmt.Sprintf("stored entry of %d bytes: %v", len(v), err)})
		}
		if n := idx / tileWidth; n != tile {
			need := int(min(to-n*tileWidth, tileWidth))
			if base, err = l.leafTile(n, need, idx, base); err != nil {
				return err
			}
			tile = n
		}
		if t := base[idx%tileWidth]; h != t {
			return l.s.integrity(&IntegrityError{Log: l.name, Index: int64(idx), Kind: IntegrityLeafMismatch,
				Detail: fmt.Sprintf("the stored entry hashes to leaf %s, the tree holds %s", h, t)})
		}
		pruned := sc.entry.flags&sPruned != 0
		payload := sc.entry.payload
		if pruned {
			payload = nil
		}
		if err := fn(idx, leaf, h, payload, pruned); err != nil {
			return err
		}
		want++
	}
	if err := it.Error(); err != nil {
		return err
	}
	if want != to {
		return l.missingEntry(want)
	}
	return nil
}

// leafScratch is the reusable state of a Leaves scan: a stored entry
// decoded in place and its leaf encoded into buf.
type leafScratch struct {
	entry   storedEntry
	leafV   merkle.Leaf
	source  merkle.Source
	headers []merkle.Header
	buf     []byte // 0x00, then the leaf's encoding
	id      []byte // a packed id's text
}

// leaf decodes the stored entry b of log without copying it and returns
// its leaf's encoding (valid until the next call) and RFC 6962 leaf hash;
// sc.entry holds the decoded entry, aliasing b, until the next call.
func (sc *leafScratch) leaf(log string, b []byte) ([]byte, merkle.Hash, error) {
	e := &sc.entry
	var err error
	if sc.id, err = e.decode(b, sc.id); err != nil {
		return nil, merkle.Hash{}, err
	}
	l := &sc.leafV
	*l = merkle.Leaf{Log: log, HasKey: e.flags&sKey != 0, Key: e.key, // the id is e.id: AppendID below
		Time: e.time, TimeAssigned: e.flags&sTimeAssigned != 0, Marks: e.marks}
	if e.flags&sSource != 0 {
		sc.source = merkle.Source{Topic: string(e.topic), Partition: e.partition, Offset: e.offset}
		l.Source = &sc.source
	}
	if e.nHeaders > 0 {
		sc.headers = sc.headers[:0]
		e.eachHeader(func(k, v []byte) {
			sc.headers = append(sc.headers, merkle.Header{Key: string(k), Value: v})
		})
		l.Headers = sc.headers
	}
	if e.flags&sPruned != 0 {
		copy(l.PayloadSHA256[:], e.payload)
	} else {
		l.PayloadSHA256 = sha256.Sum256(e.payload)
	}
	buf, err := l.AppendID(append(sc.buf[:0], 0), e.id)
	sc.buf = buf
	if err != nil {
		return nil, merkle.Hash{}, err
	}
	return buf[1:], sha256.Sum256(buf), nil
}

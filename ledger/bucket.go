package ledger

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Bucket is a small named keyspace in the ledger's database for the state of
// other components (derivation state, alerts), so that it shares the
// ledger's durability and backups. Keys are opaque bytes; iteration is in
// byte order. Writes are synced before they return.
type Bucket struct {
	s      *Store
	prefix []byte
}

// Bucket returns the named bucket. Names must be non-empty and hold no NUL
// byte; the same name always gives the same keyspace.
func (s *Store) Bucket(name string) (*Bucket, error) {
	if name == "" || containsNUL(name) {
		return nil, fmt.Errorf("ledger: invalid bucket name %q", name)
	}
	p := append([]byte{kindBucket}, name...)
	return &Bucket{s: s, prefix: append(p, 0)}, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func (b *Bucket) key(k []byte) []byte {
	return append(append(make([]byte, 0, len(b.prefix)+len(k)), b.prefix...), k...)
}

// Get returns a copy of the value of key, or ErrNotFound.
func (b *Bucket) Get(key []byte) ([]byte, error) {
	v, closer, err := b.s.db.Get(b.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Set stores value under key durably.
func (b *Bucket) Set(key, value []byte) error {
	if err := b.s.space.small(len(key) + len(value)); err != nil {
		return err
	}
	return b.s.write(func() error { return b.s.db.Set(b.key(key), value, pebble.Sync) })
}

// Delete removes key durably. Deleting a missing key is not an error.
func (b *Bucket) Delete(key []byte) error {
	return b.s.write(func() error { return b.s.db.Delete(b.key(key), pebble.Sync) })
}

// Scan calls fn for each key with the given prefix, in key order. fn must
// not keep k or v after it returns; an error from fn stops the scan.
func (b *Bucket) Scan(prefix []byte, fn func(k, v []byte) error) error {
	lo := b.key(prefix)
	it, err := b.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(it.Key()[len(b.prefix):], it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// BucketBatch groups writes to a bucket so that they land together.
type BucketBatch struct {
	b     *Bucket
	batch *pebble.Batch
}

// NewBatch starts a batch of writes; Commit applies it atomically and
// durably, Close discards it.
func (b *Bucket) NewBatch() *BucketBatch {
	return &BucketBatch{b: b, batch: b.s.db.NewBatch()}
}

// Set adds a write of key to the batch.
func (w *BucketBatch) Set(key, value []byte) { _ = w.batch.Set(w.b.key(key), value, nil) }

// Delete adds a deletion of key to the batch.
func (w *BucketBatch) Delete(key []byte) { _ = w.batch.Delete(w.b.key(key), nil) }

// DeletePrefix adds a deletion of every key with the given prefix.
func (w *BucketBatch) DeletePrefix(prefix []byte) {
	lo := w.b.key(prefix)
	_ = w.batch.DeleteRange(lo, prefixEnd(lo), nil)
}

// Len is the batch's size in bytes.
func (w *BucketBatch) Len() int { return w.batch.Len() }

// Commit applies the batch durably and releases it.
func (w *BucketBatch) Commit() error {
	err := w.b.s.space.small(w.batch.Len())
	if err == nil {
		err = w.b.s.write(func() error { return w.batch.Commit(pebble.Sync) })
	}
	w.Close()
	return err
}

// Close discards an uncommitted batch. It may be called after Commit.
func (w *BucketBatch) Close() {
	if w.batch != nil {
		_ = w.batch.Close()
		w.batch = nil
	}
}

// prefixEnd returns the least key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

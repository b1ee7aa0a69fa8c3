package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Packed index chunks (storage layout 2). A chunk of an index is stored as
// 256 buckets, one key each, chosen by the top byte of the 64-bit index key
// (idHash or leafHashKey):
//
//	kind log(u32) chunk(u32) bucket(u8) -> records sorted by fingerprint
//
// A record is the next bits of the index key (the fingerprint: 32 bits in
// the id index, 16 in the leaf-hash index) and the entry's position in the
// chunk (u16), both big-endian: 6 bytes an entry in the id index, 4 in the
// leaf-hash index, against about 15 for a key and value per entry in
// layout 1 (kind log chunk hash(u64) -> uvarint indexes). A lookup reads one
// bucket of each chunk and gets back the entries whose key matches on 40
// (id) or 24 (leaf hash) bits; the caller compares each candidate's id or
// leaf hash with what it looks for, as it did with layout 1's 64 bits. The
// id filter is keyed on the same 40 bits, so the open rebuilds it from the
// buckets.
const (
	packedKeyLen = 10
	idFPBytes    = 4
	hashFPBytes  = 2
)

// fpBytes returns the fingerprint width of kind's index.
func fpBytes(kind byte) int {
	if kind == kindIDIndex {
		return idFPBytes
	}
	return hashFPBytes
}

func packedKey(kind byte, log, chunk uint32, bucket byte) []byte {
	k := binary.BigEndian.AppendUint32(logKey(kind, log, 5), chunk)
	return append(k, bucket)
}

// fingerprint returns the w bytes of h after its bucket byte.
func fingerprint(h uint64, w int) uint32 {
	return uint32(h >> (56 - 8*w) & (1<<(8*w) - 1))
}

// appendRecord appends the record of index key h at position pos of its
// chunk.
func appendRecord(b []byte, h uint64, w int, pos uint64) []byte {
	fp := fingerprint(h, w)
	for i := w - 1; i >= 0; i-- {
		b = append(b, byte(fp>>(8*i)))
	}
	return binary.BigEndian.AppendUint16(b, uint16(pos))
}

func recordFP(r []byte, w int) uint32 {
	var fp uint32
	for _, c := range r[:w] {
		fp = fp<<8 | uint32(c)
	}
	return fp
}

var errPacked = errors.New("ledger: malformed packed index bucket")

// packedLookup returns the indexes in bucket value v of chunk c whose
// fingerprint matches h's.
func packedLookup(v []byte, kind byte, c uint64, h uint64, out []uint64) ([]uint64, error) {
	w := fpBytes(kind)
	rs := w + 2
	if len(v)%rs != 0 || len(v) == 0 {
		return out, fmt.Errorf("%w: %d bytes", errPacked, len(v))
	}
	n := len(v) / rs
	fp := fingerprint(h, w)
	i := sort.Search(n, func(i int) bool { return recordFP(v[i*rs:], w) >= fp })
	for ; i < n && recordFP(v[i*rs:], w) == fp; i++ {
		pos := binary.BigEndian.Uint16(v[i*rs+w:])
		out = append(out, c<<indexChunkBits|uint64(pos))
	}
	return out, nil
}

// packedKeys calls fn with the index key (the bits the bucket and its
// fingerprint hold, the rest zero) of each record of bucket value v.
func packedKeys(v []byte, kind byte, bucket byte, fn func(h uint64)) error {
	w := fpBytes(kind)
	rs := w + 2
	if len(v)%rs != 0 {
		return fmt.Errorf("%w: %d bytes", errPacked, len(v))
	}
	for i := 0; i < len(v); i += rs {
		fn(uint64(bucket)<<56 | uint64(recordFP(v[i:], w))<<(56-8*w))
	}
	return nil
}

// packChunk calls set with the key and value of each bucket of chunk c,
// given its entries sorted by key.
func packChunk(kind byte, log uint32, c uint64, entries []indexEntry, set func(k, v []byte) error) error {
	w := fpBytes(kind)
	var val []byte
	for i := 0; i < len(entries); {
		bucket := byte(entries[i].h >> 56)
		val = val[:0]
		for ; i < len(entries) && byte(entries[i].h>>56) == bucket; i++ {
			val = appendRecord(val, entries[i].h, w, entries[i].index-c<<indexChunkBits)
		}
		if err := set(packedKey(kind, log, uint32(c), bucket), val); err != nil {
			return err
		}
	}
	return nil
}

// decodeChunks decodes the chunk record (the x key): the chunks ingested,
// and the first chunk in the packed layout (those below it are in layout
// 1). A value of 8 bytes is layout 1's: every chunk it counts is in layout
// 1.
func decodeChunks(v []byte) (chunks, packedFrom uint64, err error) {
	switch len(v) {
	case 8:
		n := binary.BigEndian.Uint64(v)
		return n, n, nil
	case 16:
		return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), nil
	}
	return 0, 0, fmt.Errorf("ledger: index chunk record of %d bytes", len(v))
}

func encodeChunks(chunks, packedFrom uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, chunks), packedFrom)
}

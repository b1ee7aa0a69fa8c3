package ledger

import (
	"encoding/binary"
)

// Key layout. Every key starts with a one-byte kind; per-log keys follow it
// with the log's 4-byte id, so each log's data is contiguous. See
// docs/ledger-format.md.
const (
	kindName       = 'n' // n name            -> log id (u32)
	kindMeta       = 'm' // m log             -> log metadata
	kindEntry      = 'e' // e log index(u64)  -> stored entry
	kindIDIndex    = 'i' // i log chunk(u32) sha256(id)[:8] -> uvarint indexes (ingested, see index.go)
	kindHashIndex  = 'h' // h log chunk(u32) leafhash[:8]   -> uvarint indexes (ingested)
	kindChunks     = 'x' // x log                           -> index chunks ingested (u64)
	kindTile       = 't' // t log level(u8) n(u64)     -> tile hashes
	kindCheckpoint = 'c' // c log size(u64)            -> signed checkpoint note
	kindSource     = 's' // s log                      -> source position (see source.go)
	kindBucket     = 'b' // b name 0x00 key            -> other components' state (see bucket.go)
	kindLayout     = 'v' // v                          -> storage layout version (u32); absent: 1
	kindLedgered   = 'a' // a log size(u64)            -> when the group commit that made the log that size was staged (unix ns, u64)
)

// storageLayout is the storage layout this code writes (see "Pebble storage
// layout" in docs/ledger-format.md). It reads layout 1 too: an entry says
// which it is (flag bit 7), and a log's chunk record which of its index
// chunks are packed.
const storageLayout = 2

func logKey(kind byte, log uint32, extra int) []byte {
	k := make([]byte, 5, 5+extra)
	k[0] = kind
	binary.BigEndian.PutUint32(k[1:], log)
	return k
}

func nameKey(name string) []byte { return append([]byte{kindName}, name...) }

func metaKey(log uint32) []byte { return logKey(kindMeta, log, 0) }

func entryKey(log uint32, index uint64) []byte {
	return binary.BigEndian.AppendUint64(logKey(kindEntry, log, 8), index)
}

func sourceKey(log uint32) []byte { return logKey(kindSource, log, 0) }

func chunksKey(log uint32) []byte { return logKey(kindChunks, log, 0) }

func tileKey(log uint32, level uint8, n uint64) []byte {
	k := append(logKey(kindTile, log, 9), level)
	return binary.BigEndian.AppendUint64(k, n)
}

func ledgeredKey(log uint32, size uint64) []byte {
	return binary.BigEndian.AppendUint64(logKey(kindLedgered, log, 8), size)
}

func checkpointKey(log uint32, size uint64) []byte {
	return binary.BigEndian.AppendUint64(logKey(kindCheckpoint, log, 8), size)
}

// decodeIndexes decodes a concatenation of uvarint leaf indexes.
func decodeIndexes(b []byte) ([]uint64, bool) {
	var out []uint64
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, false
		}
		out = append(out, v)
		b = b[n:]
	}
	return out, true
}

package ledger

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// Pebble settings of the storage layout (see "Pebble storage layout" in
// docs/ledger-format.md):
//
//   - columnar sstables (table format v6): a key costs its unshared bytes
//     and a few bits of offsets instead of a row's varints and 8-byte
//     trailer;
//   - 32 KiB data blocks: an entry is ~300 bytes, so a 4 KiB block holds
//     about 13 and its header, column offsets and checksum cost ~8 bytes
//     per entry;
//   - Bloom filters (10 bits per key) on every key but those that are
//     always present when asked for: entries (read only below the tree
//     size) and packed index buckets (one per bucket of a chunk).
const (
	storeFormat    = pebble.FormatTableFormatV6
	storeBlockSize = 32 << 10
	bloomBits      = 10
)

// pebbleOptions returns the Pebble options of a store. The caller sets the
// cache and logger, and may change the rest before Open.
func pebbleOptions() *pebble.Options {
	po := &pebble.Options{FormatMajorVersion: storeFormat}
	// Tables written before the filter below existed carry the stock
	// Bloom filter; it stays registered so that their filters are read.
	stock := bloom.FilterPolicy(bloomBits)
	po.Filters = map[string]pebble.FilterPolicy{stock.Name(): stock}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = ledgerFilter{stock}
		po.Levels[i].BlockSize = storeBlockSize
	}
	return po
}

// ledgerFilter is a Bloom filter over the keys a lookup may miss. It has
// its own name, so a tool that opens the store with the stock Bloom filter
// ignores these filters (which lack the entry keys) instead of trusting
// them.
type ledgerFilter struct{ bloom pebble.FilterPolicy }

// filtered reports whether a key goes into the filter.
func filtered(key []byte) bool {
	if len(key) == 0 {
		return true
	}
	switch key[0] {
	case kindEntry:
		return false
	case kindIDIndex, kindHashIndex:
		return len(key) != packedKeyLen
	}
	return true
}

func (ledgerFilter) Name() string { return "auditd.ledger.bloom10" }

func (f ledgerFilter) MayContain(ft pebble.FilterType, filter, key []byte) bool {
	return !filtered(key) || f.bloom.MayContain(ft, filter, key)
}

func (f ledgerFilter) NewWriter(ft pebble.FilterType) pebble.FilterWriter {
	return filterWriter{f.bloom.NewWriter(ft)}
}

type filterWriter struct{ w pebble.FilterWriter }

func (w filterWriter) AddKey(key []byte) {
	if filtered(key) {
		w.w.AddKey(key)
	}
}

func (w filterWriter) Finish(dst []byte) []byte { return w.w.Finish(dst) }

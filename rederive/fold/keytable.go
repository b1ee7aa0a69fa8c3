package fold

import (
	"hash/maphash"
	"unsafe"
)

// keyInline is the longest key a keyTable holds in its own entries.
const keyInline = 22

// keyTable maps a shard's keys to their slots. Keys of up to keyInline
// bytes sit in the table's entries, which hold no pointers: a lookup
// reads one entry (no string elsewhere in memory to compare with), and
// the garbage collector has nothing to scan in it, where a
// map[string]*slot of a million keys costs a million strings and two
// million pointers at each cycle. Longer keys go to a map.
type keyTable struct {
	seed  maphash.Seed
	ents  []keyEnt // open addressing, linear probing; a power of two long
	n     int      // entries used
	long  map[string]int32
	slots [][]slot // slot i is slots[i>>slotShift][i&slotMask]
	count int32    // slots used
}

const (
	slotShift = 10
	slotMask  = 1<<slotShift - 1
)

// keyEnt is one key of a keyTable. tag is the high half of the key's hash
// with its lowest bit set, 0 for an empty entry.
type keyEnt struct {
	tag  uint32
	slot int32
	klen uint8
	key  [keyInline]byte
}

func newKeyTable() *keyTable {
	return &keyTable{seed: maphash.MakeSeed(), ents: make([]keyEnt, 1024), long: make(map[string]int32)}
}

func keyTag(h uint64) uint32 { return uint32(h>>32) | 1 }

// find returns the slot of key, or nil.
func (t *keyTable) find(key string) *slot {
	if len(key) > keyInline {
		if i, ok := t.long[key]; ok {
			return t.slot(i)
		}
		return nil
	}
	h := maphash.String(t.seed, key)
	tag, mask := keyTag(h), uint64(len(t.ents)-1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := &t.ents[i]
		if e.tag == 0 {
			return nil
		}
		if e.tag == tag && int(e.klen) == len(key) && string(e.key[:e.klen]) == key {
			return t.slot(e.slot)
		}
	}
}

// add adds key, which the table does not hold, and returns its new slot.
// The table keeps no reference to key's memory.
func (t *keyTable) add(key string) *slot {
	if t.count&slotMask == 0 {
		t.slots = append(t.slots, make([]slot, 1<<slotShift))
	}
	i := t.count
	t.count++
	if len(key) > keyInline {
		t.long[string(append([]byte(nil), key...))] = i
		return t.slot(i)
	}
	if (t.n+1)*4 > len(t.ents)*3 {
		t.grow()
	}
	t.insert(maphash.String(t.seed, key), key, i)
	t.n++
	return t.slot(i)
}

func (t *keyTable) insert(h uint64, key string, s int32) {
	mask := uint64(len(t.ents) - 1)
	i := h & mask
	for t.ents[i].tag != 0 {
		i = (i + 1) & mask
	}
	e := &t.ents[i]
	e.tag, e.slot, e.klen = keyTag(h), s, uint8(len(key))
	copy(e.key[:], key)
}

func (t *keyTable) grow() {
	old := t.ents
	t.ents = make([]keyEnt, 2*len(old))
	for i := range old {
		if e := &old[i]; e.tag != 0 {
			k := unsafe.String(&e.key[0], int(e.klen)) // copied by insert
			t.insert(maphash.String(t.seed, k), k, e.slot)
		}
	}
}

func (t *keyTable) slot(i int32) *slot { return &t.slots[i>>slotShift][i&slotMask] }

// len returns the number of keys.
func (t *keyTable) len() int { return int(t.count) }

// each calls fn with every key, as a new string, and its slot.
func (t *keyTable) each(fn func(key string, sl *slot)) {
	for i := range t.ents {
		if e := &t.ents[i]; e.tag != 0 {
			fn(string(e.key[:e.klen]), t.slot(e.slot))
		}
	}
	for k, i := range t.long {
		fn(k, t.slot(i))
	}
}

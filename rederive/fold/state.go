package fold

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// A saved result lives in a bucket under its derivation's name:
//
//	<name> 0x00 'm'                              meta: JSON stateMeta
//	<name> 0x00 'k' <generation, u64 big-endian> <key>   one record per key
//
// A key's record is
//
//	uvarint len, state (Derivation.Encode)
//	flags u8 (bit 0: the newest entry follows)
//	[uvarint pin+1 (its log's position in meta.Pins, plus one), uvarint
//	 index, varint time (Unix ns), leaf hash (32 bytes), id to the end]
//
// SaveResult writes the keys under a new generation, committing a batch
// whenever it reaches saveBatchBytes, and then, in one last batch, switches
// the meta to the new generation and deletes the old one. The meta is the
// only pointer to a generation, so a crash at any point leaves the old
// result or the new one whole.
const (
	stateVersion   = 1
	saveBatchBytes = 64 << 20
)

type stateMeta struct {
	Version     int          `json:"version"`
	Generation  uint64       `json:"generation"`
	Derivation  string       `json:"derivation"`
	Fingerprint string       `json:"fingerprint,omitempty"`
	Pins        []Pin        `json:"pins"`
	Keys        int          `json:"keys"`
	Events      uint64       `json:"events"`
	Applied     uint64       `json:"applied"`
	ErrorCount  int          `json:"error_count"`
	Errors      []EventError `json:"errors,omitempty"`
	Saved       time.Time    `json:"saved"`
}

func stateMetaKey(name string) []byte { return []byte(name + "\x00m") }

func stateKeysPrefix(name string) []byte { return []byte(name + "\x00k") }

func stateGenPrefix(name string, gen uint64) []byte {
	return binary.BigEndian.AppendUint64(stateKeysPrefix(name), gen)
}

func checkStateName(name string) error {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("rederive: invalid derivation name %q", name)
	}
	return nil
}

// SaveResult stores r as d's result in b, replacing the one saved before,
// atomically: after a crash LoadResult returns the old result or the new
// one, never a mix. Saves of one derivation must not run concurrently.
func SaveResult(b *ledger.Bucket, d Derivation, r *Result) error {
	name := d.Name()
	if err := checkStateName(name); err != nil {
		return err
	}
	if r.Derivation != name {
		return fmt.Errorf("rederive: save %s: the result is of derivation %q", name, r.Derivation)
	}
	var old uint64 // 0: no readable meta
	if v, err := b.Get(stateMetaKey(name)); err == nil {
		if m, err := decodeStateMeta(v); err == nil {
			old = m.Generation
		}
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("rederive: save %s: %w", name, err)
	}
	gen := old + 1
	pins := make(map[string]uint64, len(r.Pins))
	for i, p := range r.Pins {
		pins[p.Log] = uint64(i) + 1
	}

	w := b.NewBatch()
	defer func() { w.Close() }()
	if old == 0 {
		// No meta, or one we cannot read: no generation is live.
		w.DeletePrefix(stateKeysPrefix(name))
	} else {
		w.DeletePrefix(stateGenPrefix(name, gen)) // left by a crashed save
	}
	prefix := stateGenPrefix(name, gen)
	key := prefix
	var val []byte
	// In key order: Pebble sorts a large batch before it applies it.
	for _, k := range slices.Sorted(maps.Keys(r.States)) {
		enc, err := d.Encode(r.States[k])
		if err != nil {
			return fmt.Errorf("rederive: save %s: encode the state of %q: %w", name, k, err)
		}
		val = binary.AppendUvarint(val[:0], uint64(len(enc)))
		val = append(val, enc...)
		if ref, ok := r.Newest[k]; ok {
			pin := pins[ref.Log]
			if pin == 0 {
				return fmt.Errorf("rederive: save %s: the newest entry of %q is of log %s, which the result does not pin", name, k, ref.Log)
			}
			val = append(val, 1)
			val = binary.AppendUvarint(val, pin)
			val = binary.AppendUvarint(val, ref.Index)
			val = binary.AppendVarint(val, ref.Time.UnixNano())
			val = append(val, ref.LeafHash[:]...)
			val = append(val, ref.ID...)
		} else {
			val = append(val, 0)
		}
		key = append(key[:len(prefix)], k...)
		w.Set(key, val)
		if w.Len() >= saveBatchBytes {
			if err := w.Commit(); err != nil {
				return fmt.Errorf("rederive: save %s: %w", name, err)
			}
			w = b.NewBatch()
		}
	}
	m := stateMeta{
		Version: stateVersion, Generation: gen, Derivation: name, Fingerprint: r.Fingerprint,
		Pins: r.Pins, Keys: len(r.States), Events: r.Events, Applied: r.Applied,
		ErrorCount: r.ErrorCount, Errors: r.Errors, Saved: time.Now().UTC(),
	}
	mv, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("rederive: save %s: %w", name, err)
	}
	w.Set(stateMetaKey(name), mv)
	if old != 0 {
		w.DeletePrefix(stateGenPrefix(name, old))
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("rederive: save %s: %w", name, err)
	}
	return nil
}

func decodeStateMeta(v []byte) (*stateMeta, error) {
	var m stateMeta
	if err := json.Unmarshal(v, &m); err != nil {
		return nil, err
	}
	if m.Version != stateVersion {
		return nil, fmt.Errorf("unknown format version %d", m.Version)
	}
	if m.Generation == 0 {
		return nil, errors.New("generation 0")
	}
	return &m, nil
}

// LoadResult returns d's result saved in b, or an error wrapping
// ledger.ErrNotFound when there is none. The caller compares its
// Fingerprint with the derivation's before folding on from it.
func LoadResult(b *ledger.Bucket, d Derivation) (*Result, error) {
	name := d.Name()
	if err := checkStateName(name); err != nil {
		return nil, err
	}
	v, err := b.Get(stateMetaKey(name))
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("rederive: load %s: no saved result: %w", name, ledger.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("rederive: load %s: %w", name, err)
	}
	m, err := decodeStateMeta(v)
	if err != nil {
		return nil, fmt.Errorf("rederive: load %s: corrupt meta: %w", name, err)
	}
	r := &Result{
		Derivation: name, Fingerprint: m.Fingerprint, Pins: m.Pins,
		States: make(map[string]State, m.Keys), Newest: make(map[string]EventRef, m.Keys),
		Events: m.Events, Applied: m.Applied, ErrorCount: m.ErrorCount, Errors: m.Errors,
	}
	// Two goroutines fill the two maps while this one reads and decodes
	// the records: on a million keys, map inserts cost as much as the
	// rest.
	type record struct {
		key    string
		state  State
		ref    EventRef
		hasRef bool
	}
	const chunk = 4096
	toStates, toNewest := make(chan []record, 4), make(chan []record, 4)
	var wg sync.WaitGroup
	wg.Go(func() {
		for c := range toStates {
			for i := range c {
				r.States[c[i].key] = c[i].state
			}
		}
	})
	wg.Go(func() {
		for c := range toNewest {
			for i := range c {
				if c[i].hasRef {
					r.Newest[c[i].key] = c[i].ref
				}
			}
		}
	})
	prefix := stateGenPrefix(name, m.Generation)
	c := make([]record, 0, chunk)
	n := 0
	err = b.Scan(prefix, func(k, v []byte) error {
		key := string(k[len(prefix):])
		state, ref, hasRef, err := decodeStateRecord(d, m.Pins, v)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		n++
		if c = append(c, record{key, state, ref, hasRef}); len(c) == chunk {
			toStates <- c
			toNewest <- c
			c = make([]record, 0, chunk)
		}
		return nil
	})
	toStates <- c
	toNewest <- c
	close(toStates)
	close(toNewest)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("rederive: load %s: %w", name, err)
	}
	if n != m.Keys {
		return nil, fmt.Errorf("rederive: load %s: %d keys stored, the meta says %d", name, n, m.Keys)
	}
	return r, nil
}

// SavedPins returns the fingerprint and pins of the result saved for the
// named derivation in b, reading its meta only, or an error wrapping
// ledger.ErrNotFound when there is none.
func SavedPins(b *ledger.Bucket, name string) (string, []Pin, error) {
	v, err := b.Get(stateMetaKey(name))
	if err != nil {
		return "", nil, fmt.Errorf("rederive: load %s: %w", name, err)
	}
	m, err := decodeStateMeta(v)
	if err != nil {
		return "", nil, fmt.Errorf("rederive: load %s: corrupt meta: %w", name, err)
	}
	return m.Fingerprint, m.Pins, nil
}

var errStateRecord = errors.New("corrupt state record")

func decodeStateRecord(d Derivation, pins []Pin, v []byte) (State, EventRef, bool, error) {
	var ref EventRef
	n, k := binary.Uvarint(v)
	if k <= 0 || uint64(len(v)-k) < n+1 {
		return nil, ref, false, errStateRecord
	}
	state, err := d.Decode(v[k : k+int(n)])
	if err != nil {
		return nil, ref, false, fmt.Errorf("decode state: %w", err)
	}
	v = v[k+int(n):]
	switch v[0] {
	case 0:
		if len(v) != 1 {
			return nil, ref, false, errStateRecord
		}
		return state, ref, false, nil
	case 1:
		v = v[1:]
	default:
		return nil, ref, false, errStateRecord
	}
	pin, k := binary.Uvarint(v)
	if k <= 0 || pin == 0 || pin > uint64(len(pins)) {
		return nil, ref, false, errStateRecord
	}
	v = v[k:]
	ref.Log = pins[pin-1].Log
	if ref.Index, k = binary.Uvarint(v); k <= 0 {
		return nil, ref, false, errStateRecord
	}
	v = v[k:]
	ns, k := binary.Varint(v)
	if k <= 0 || len(v)-k < merkle.HashSize {
		return nil, ref, false, errStateRecord
	}
	v = v[k:]
	ref.Time = time.Unix(0, ns).UTC()
	copy(ref.LeafHash[:], v)
	ref.ID = string(v[merkle.HashSize:])
	return state, ref, true, nil
}

// DeleteResult removes the result saved for the named derivation from b,
// if any.
func DeleteResult(b *ledger.Bucket, name string) error {
	if err := checkStateName(name); err != nil {
		return err
	}
	w := b.NewBatch()
	w.Delete(stateMetaKey(name))
	w.DeletePrefix(stateKeysPrefix(name))
	if err := w.Commit(); err != nil {
		return fmt.Errorf("rederive: delete the result of %s: %w", name, err)
	}
	return nil
}

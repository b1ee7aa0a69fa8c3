package compare

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/auditd/auditd/rederive/store"
)

// Baseline is what an incremental comparison remembers of the expected
// values of the last clean comparison: for each key, a hash of the key
// and a hash of its value (SHA-256, 64 bits each). It holds no key or
// value itself, 16 bytes per key.
type Baseline struct {
	pairs [][2]uint64 // (key hash, value hash), sorted
}

// NewBaseline remembers expected, the values a clean comparison found in
// the store.
func NewBaseline(expected map[string]any) *Baseline {
	b := &Baseline{pairs: make([][2]uint64, 0, len(expected))}
	var buf []byte
	for k, v := range expected {
		var h [2]uint64
		h, buf = pairHash(buf, k, v)
		b.pairs = append(b.pairs, h)
	}
	slices.SortFunc(b.pairs, func(x, y [2]uint64) int {
		if x[0] != y[0] {
			if x[0] < y[0] {
				return -1
			}
			return 1
		}
		return 0
	})
	return b
}

// Len is the number of keys remembered.
func (b *Baseline) Len() int { return len(b.pairs) }

// pairHash hashes a key and its value. A value is written as its
// canonical text for sums where it has one, else as JSON (a timestamp as
// RFC 3339 with nanoseconds), so a value written otherwise (12.50 for
// 12.5) may count as changed: it is compared, never skipped.
func pairHash(buf []byte, k string, v any) ([2]uint64, []byte) {
	kh := sha256.Sum256([]byte(k))
	buf = buf[:0]
	var ok bool
	if buf, ok = appendScalar(buf, v); !ok {
		buf = append(buf[:0], 'J')
		if t, isTime := v.(time.Time); isTime {
			buf = append(buf, t.UTC().Format(time.RFC3339Nano)...)
		} else if j, err := json.Marshal(v); err == nil {
			buf = append(buf, j...)
		} else {
			buf = binary.BigEndian.AppendUint64(buf, rand.Uint64()) // never equal: always compared
		}
	}
	vh := sha256.Sum256(buf)
	return [2]uint64{binary.BigEndian.Uint64(kh[:8]), binary.BigEndian.Uint64(vh[:8])}, buf
}

// value returns the value hash remembered for a key hash.
func (b *Baseline) value(kh uint64) (uint64, bool) {
	i, ok := slices.BinarySearchFunc(b.pairs, kh, func(p [2]uint64, kh uint64) int {
		switch {
		case p[0] < kh:
			return -1
		case p[0] > kh:
			return 1
		}
		return 0
	})
	if !ok {
		return 0, false
	}
	return b.pairs[i][1], true
}

const baselineMagic = "auditd compare baseline v1\n"

// MarshalBinary encodes b.
func (b *Baseline) MarshalBinary() ([]byte, error) {
	out := make([]byte, 0, len(baselineMagic)+16*len(b.pairs))
	out = append(out, baselineMagic...)
	for _, p := range b.pairs {
		out = binary.BigEndian.AppendUint64(out, p[0])
		out = binary.BigEndian.AppendUint64(out, p[1])
	}
	return out, nil
}

// UnmarshalBinary decodes what MarshalBinary encoded.
func (b *Baseline) UnmarshalBinary(data []byte) error {
	if len(data) < len(baselineMagic) || string(data[:len(baselineMagic)]) != baselineMagic || (len(data)-len(baselineMagic))%16 != 0 {
		return errors.New("compare: not a baseline")
	}
	data = data[len(baselineMagic):]
	b.pairs = make([][2]uint64, len(data)/16)
	for i := range b.pairs {
		b.pairs[i] = [2]uint64{binary.BigEndian.Uint64(data[16*i:]), binary.BigEndian.Uint64(data[16*i+8:])}
		if i > 0 && b.pairs[i][0] < b.pairs[i-1][0] {
			return errors.New("compare: baseline out of order")
		}
	}
	return nil
}

// ErrNoBaseline: an incremental comparison cannot be made (the store
// cannot read given keys, or keys of the baseline are no longer
// expected); the caller compares in full.
var ErrNoBaseline = errors.New("compare: no incremental comparison")

// CompareChanged compares only the keys whose expected value changed
// since base was taken (new keys and keys deleted since included), by
// reading their rows alone; every other key counts as matched
// (Stats.Unchanged), as the clean comparison base was taken at found it.
// Drift in those keys made in the store since, and extra keys added to
// it, are found only by a full comparison (Compare).
//
// It returns an ErrNoBaseline error, having reported nothing, when the
// store cannot read rows by key or a key of base is no longer expected
// (the derivation changed); the caller then runs Compare. Other errors
// are as Compare's.
func CompareChanged(ctx context.Context, s store.Store, expected map[string]any, base *Baseline, c Config, fn func(Drift) error) (Stats, error) {
	st := Stats{Keys: int64(len(expected))}
	if err := c.Check(); err != nil {
		return st, err
	}
	kr, ok := s.(store.KeyReader)
	if !ok {
		return st, fmt.Errorf("%w: the store cannot read rows by key", ErrNoBaseline)
	}
	var changed []string
	var found int
	var buf []byte
	for k, v := range expected {
		var h [2]uint64
		h, buf = pairHash(buf, k, v)
		old, ok := base.value(h[0])
		if ok {
			found++
		}
		if !ok || old != h[1] {
			changed = append(changed, k)
		}
	}
	if found != base.Len() {
		return st, fmt.Errorf("%w: %d keys of the last clean comparison are no longer expected", ErrNoBaseline, base.Len()-found)
	}
	slices.Sort(changed)
	j := newJudge(expected, &c, fn, len(changed))
	j.st.Unchanged = int64(len(expected) - len(changed))
	j.st.Matched = j.st.Unchanged
	want := newKeySet(len(changed))
	for _, k := range changed {
		want.add(k)
	}
	for len(changed) > 0 {
		chunk := changed[:min(len(changed), 10_000)]
		changed = changed[len(chunk):]
		err := kr.ScanKeys(ctx, chunk, func(r store.Row) error {
			if !want.has(r.Key) {
				return nil // equal under the store's collation only
			}
			return j.row(r)
		})
		if errors.Is(err, store.ErrNoSums) {
			return st, fmt.Errorf("%w: %w", ErrNoBaseline, err)
		}
		if err != nil {
			return j.st, err
		}
		var missing []string
		for _, k := range chunk {
			if j.seen.has(k) {
				continue
			}
			if expected[k] == nil {
				j.st.Matched++
				continue
			}
			missing = append(missing, k)
		}
		if err := j.missing(ctx, missing); err != nil {
			return j.st, err
		}
	}
	return j.st, nil
}

package compare

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/auditd/auditd/rederive/store"
)

// sumTuning sizes the key ranges of method sums.
type sumTuning struct {
	// bucketKeys is the number of expected keys per range of the first
	// sum, which covers the whole store; maxBuckets bounds the number of
	// ranges.
	bucketKeys, maxBuckets int
	// leafRows: a range that differs and holds at most this many rows on
	// either side is read row by row; a larger one is split in fanout
	// ranges and summed again.
	leafRows, fanout int
	// fallback: when the ranges that differ hold more than this fraction
	// of the expected keys, every row is read instead.
	fallback float64
}

var defaultSumTuning = sumTuning{bucketKeys: 1024, maxBuckets: 16384, leafRows: 1024, fanout: 32, fallback: 0.25}

// tuning is the sizing in effect; tests make it small.
var tuning = defaultSumTuning

// rangeAcc is the expected side of a key range: its number of rows (keys
// not deleted), the 128-bit sum of their hashes, and whether a key in it
// has a value that writes no canonical text (the range is then read row
// by row).
type rangeAcc struct {
	rows   int64
	hi, lo uint64
	forced bool
}

// add adds a signed 64-bit hash (as its bits).
func (a *rangeAcc) add(h uint64) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, h, 0)
	a.hi += carry
	if int64(h) < 0 {
		a.hi-- // sign extension: + (2^64 - 1)·2^64
	}
	a.rows++
}

func (a *rangeAcc) merge(b rangeAcc) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, b.lo, 0)
	a.hi += b.hi + carry
	a.rows += b.rows
	a.forced = a.forced || b.forced
}

// equals reports whether the store's sum of a range is the expected one.
func (a rangeAcc) equals(s store.RangeSum) bool {
	return !a.forced && a.rows == s.Rows && a.hi == s.Hi && a.lo == s.Lo
}

// hasher writes expected rows' canonical text (see package store) and
// hashes it.
type hasher struct {
	layout store.SumLayout
	seed   uint64
	buf    []byte
}

// hash returns the hash of the row key, v; ok is false when v
// writes no canonical text (a timestamp, a list, a float NaN, a map
// whose fields are not the store's columns).
func (h *hasher) hash(key string, v any) (uint64, bool) {
	b := strconv.AppendInt(h.buf[:0], int64(len(key)), 10)
	b = append(b, ':')
	b = append(b, key...)
	ok := true
	switch {
	case h.layout.Single:
		b, ok = appendScalar(b, v)
	default:
		m, isMap := v.(map[string]any)
		if !isMap || len(m) != len(h.layout.Columns) {
			ok = false
			break
		}
		for _, name := range h.layout.Columns {
			f, in := m[name]
			if !in {
				ok = false
				break
			}
			b = append(b, 'c')
			b = strconv.AppendInt(b, int64(len(name)), 10)
			b = append(b, ':')
			b = append(b, name...)
			if b, ok = appendScalar(b, f); !ok {
				break
			}
		}
	}
	h.buf = b
	if !ok {
		return 0, false
	}
	return store.HashText(b, h.seed), true
}

// appendScalar appends a scalar's canonical text.
func appendScalar(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, 'Z'), true
	case bool:
		if v {
			return append(b, 'T'), true
		}
		return append(b, 'F'), true
	case string:
		b = append(b, 's')
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		return append(b, v...), true
	case float64:
		return appendFloat(b, v)
	case float32:
		return appendFloat(b, float64(v))
	case json.Number:
		if !store.IsJSONNumber(string(v)) {
			return b, false
		}
		d, ok := parseDecimal(string(v))
		if !ok || d.exp > 1000 || d.exp < -1000 {
			return b, false
		}
		b = append(b, 'n')
		b = d.appendPlain(b)
		return append(b, ';'), true
	}
	n, ok := asNumber(v)
	if !ok {
		return b, false
	}
	b = append(b, 'n')
	b = append(b, n.text()...)
	return append(b, ';'), true
}

func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	if f == 0 {
		f = 0 // -0 is 0
	}
	b = append(b, 'n')
	b = strconv.AppendFloat(b, f, 'f', -1, 64)
	return append(b, ';'), true
}

// appendPlain appends d in plain decimal: no exponent, no leading zeros
// but the one before a point, no trailing zeros after the point, "0" for
// zero.
func (d decimal) appendPlain(b []byte) []byte {
	n := d.hi - d.lo
	if n == 0 {
		return append(b, '0')
	}
	if d.neg {
		b = append(b, '-')
	}
	switch {
	case d.exp <= 0:
		b = append(b, '0', '.')
		for range -d.exp {
			b = append(b, '0')
		}
		for i := d.lo; i < d.hi; i++ {
			b = append(b, d.digit(i))
		}
	case d.exp >= int64(n):
		for i := d.lo; i < d.hi; i++ {
			b = append(b, d.digit(i))
		}
		for range d.exp - int64(n) {
			b = append(b, '0')
		}
	default:
		for i := 0; i < n; i++ {
			if int64(i) == d.exp {
				b = append(b, '.')
			}
			b = append(b, d.digit(d.lo+i))
		}
	}
	return b
}

// bucketOf returns the bucket of k among sorted bounds: the number of
// bounds at or below k.
func bucketOf(bounds []string, k string) int {
	return sort.Search(len(bounds), func(i int) bool { return bounds[i] > k })
}

// sumRange is a key range that is summed, or read: its expected keys
// (sorted, not deleted ones included) and the rows the store holds in
// it.
type sumRange struct {
	r         store.KeyRange
	keys      []string
	storeRows int64
}

// compareSums compares by sums over key ranges, as Config.Method
// describes. done is false when the store cannot sum its rows, or the
// sums differ in so many ranges that reading every row is cheaper: the
// caller then reads every row.
func compareSums(ctx context.Context, s store.Store, sm store.Summer, expected map[string]any, c Config, fn func(Drift) error) (st Stats, err error, done bool) {
	layout, err := sm.SumLayout(ctx)
	if errors.Is(err, store.ErrNoSums) {
		return st, nil, false
	}
	if err != nil {
		return Stats{Keys: int64(len(expected))}, err, true
	}
	t := tuning
	n := len(expected)
	// A seed of its own for each comparison: a store cannot be made to
	// keep its sums by rows chosen in advance.
	seed := rand.Uint64()

	// The first ranges: bounds drawn from a sample of the keys. A map's
	// order has nothing to do with the keys' order, so its first keys are
	// a fair sample.
	k := min(max(n/t.bucketKeys, 1), t.maxBuckets)
	var bounds []string
	if k > 1 {
		sample := make([]string, 0, min(n, 16*k))
		for key := range expected {
			if len(sample) == cap(sample) {
				break
			}
			sample = append(sample, key)
		}
		slices.Sort(sample)
		for i := 1; i < k; i++ {
			bounds = append(bounds, sample[i*len(sample)/k])
		}
		bounds = slices.Compact(bounds)
	}

	// The store sums while the expected side is hashed.
	var sums []store.RangeSum
	var sumErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sums, sumErr = sm.Sums(ctx, nil, bounds, seed)
	}()
	acc, err := hashAll(ctx, expected, &hasher{layout: layout, seed: seed}, bounds)
	wg.Wait()
	if err != nil {
		return Stats{Keys: int64(len(expected))}, err, true
	}
	if sumErr != nil {
		return Stats{Keys: int64(len(expected))}, sumErr, true
	}
	st.SumQueries++

	// The ranges whose sums differ.
	differ := make([]bool, len(acc))
	var differKeys int64
	for i := range acc {
		if !acc[i].equals(sums[i]) {
			differ[i] = true
			differKeys += max(acc[i].rows, sums[i].Rows)
		}
	}
	if float64(differKeys) > t.fallback*float64(n) && differKeys > int64(t.leafRows) {
		return st, nil, false
	}

	// Their expected keys, sorted.
	var keys []string
	for key := range expected {
		if differKeys == 0 {
			break
		}
		if differ[bucketOf(bounds, key)] {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	j := newJudge(expected, &c, fn, len(keys))
	j.st.SumQueries = st.SumQueries
	var ranges []sumRange
	for i := range acc {
		r := store.KeyRange{Open: i == len(bounds)}
		if i > 0 {
			r.Lo = bounds[i-1]
		}
		if !r.Open {
			r.Hi = bounds[i]
		}
		if !differ[i] {
			continue
		}
		lo := sort.SearchStrings(keys, r.Lo)
		hi := len(keys)
		if !r.Open {
			hi = sort.SearchStrings(keys, r.Hi)
		}
		ranges = append(ranges, sumRange{r: r, keys: keys[lo:hi], storeRows: sums[i].Rows})
	}
	matchedKeys := int64(n - len(keys))
	j.st.Matched += matchedKeys
	j.st.Summed = matchedKeys

	h := &hasher{layout: layout, seed: seed}
	var leaves []sumRange
	for len(ranges) > 0 {
		if err := ctx.Err(); err != nil {
			return j.st, err, true
		}
		var split []sumRange
		for _, r := range ranges {
			if max(int64(len(r.keys)), r.storeRows) <= int64(t.leafRows) || len(r.keys) < 2 {
				leaves = append(leaves, r)
			} else {
				split = append(split, r)
			}
		}
		if len(split) == 0 {
			break
		}
		// Split each range at keys of its own, and sum all the parts in
		// one query.
		var within []store.KeyRange
		var bounds []string
		var parts []sumRange
		for _, r := range split {
			within = append(within, r.r)
			cuts := []string{r.r.Lo}
			for i := 1; i < t.fanout; i++ {
				cuts = append(cuts, r.keys[i*len(r.keys)/t.fanout])
			}
			cuts = slices.Compact(cuts)
			for i, lo := range cuts {
				p := store.KeyRange{Lo: lo, Hi: r.r.Hi, Open: r.r.Open}
				if i+1 < len(cuts) {
					p.Hi, p.Open = cuts[i+1], false
				}
				a := sort.SearchStrings(r.keys, p.Lo)
				b := len(r.keys)
				if !p.Open {
					b = sort.SearchStrings(r.keys, p.Hi)
				}
				parts = append(parts, sumRange{r: p, keys: r.keys[a:b]})
			}
			bounds = append(bounds, cuts...)
			if !r.r.Open {
				bounds = append(bounds, r.r.Hi)
			}
		}
		bounds = slices.Compact(bounds)
		sums, err := sm.Sums(ctx, within, bounds, seed)
		if err != nil {
			return j.st, err, true
		}
		j.st.SumQueries++
		ranges = ranges[:0:0]
		for _, p := range parts {
			var a rangeAcc
			for _, key := range p.keys {
				if v := expected[key]; v != nil {
					if x, ok := h.hash(key, v); ok {
						a.add(x)
					} else {
						a.forced = true
					}
				}
			}
			sum := sums[bucketOf(bounds, p.r.Lo)]
			if a.equals(sum) {
				j.st.Matched += int64(len(p.keys))
				j.st.Summed += int64(len(p.keys))
				continue
			}
			p.storeRows = sum.Rows
			ranges = append(ranges, p)
		}
	}
	if len(leaves) == 0 {
		return j.st, nil, true
	}

	// Read the rows of the ranges that differ.
	within := make([]store.KeyRange, len(leaves))
	for i, r := range leaves {
		within[i] = r.r
	}
	if err := sm.ScanRanges(ctx, within, j.row); err != nil {
		return j.st, err, true
	}
	var missing []string
	for _, r := range leaves {
		for _, key := range r.keys {
			if j.seen.has(key) {
				continue
			}
			if expected[key] == nil {
				j.st.Matched++
				continue
			}
			missing = append(missing, key)
		}
	}
	return j.st, j.missing(ctx, missing), true
}

// hashAll hashes every expected row into the bucket of its key among
// bounds, on every core.
func hashAll(ctx context.Context, expected map[string]any, proto *hasher, bounds []string) ([]rangeAcc, error) {
	type pair struct {
		k string
		v any
	}
	workers := max(runtime.GOMAXPROCS(0), 1)
	batches := make(chan []pair, 2*workers)
	accs := make([][]rangeAcc, workers)
	var wg sync.WaitGroup
	for w := range workers {
		accs[w] = make([]rangeAcc, len(bounds)+1)
		wg.Add(1)
		go func(acc []rangeAcc) {
			defer wg.Done()
			h := &hasher{layout: proto.layout, seed: proto.seed}
			for batch := range batches {
				for _, p := range batch {
					a := &acc[bucketOf(bounds, p.k)]
					if x, ok := h.hash(p.k, p.v); ok {
						a.add(x)
					} else {
						a.forced = true
					}
				}
			}
		}(accs[w])
	}
	const size = 1024
	batch := make([]pair, 0, size)
	var err error
	for k, v := range expected {
		if v == nil {
			continue // deleted: the store must not hold it, or (deleted: null) may
		}
		batch = append(batch, pair{k, v})
		if len(batch) == size {
			if err = ctx.Err(); err != nil {
				break
			}
			batches <- batch
			batch = make([]pair, 0, size)
		}
	}
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	acc := accs[0]
	for _, o := range accs[1:] {
		for i := range acc {
			acc[i].merge(o[i])
		}
	}
	return acc, nil
}

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

// bucketer finds keys' buckets among many sorted bounds (bucketOf) with
// few string comparisons: the bounds' common prefix is compared once,
// then the 8 bytes after it as an integer, and whole strings only among
// bounds whose 8 bytes are the key's.
type bucketer struct {
	bounds []string
	prefix string   // the bounds' longest common prefix
	pre    []uint64 // each bound's 8 bytes after prefix (see word8)
}

func newBucketer(bounds []string) *bucketer {
	b := &bucketer{bounds: bounds}
	if len(bounds) == 0 {
		return b
	}
	// Sorted: the common prefix of all is that of the first and last.
	first, last := bounds[0], bounds[len(bounds)-1]
	n := 0
	for n < len(first) && n < len(last) && first[n] == last[n] {
		n++
	}
	b.prefix = first[:n]
	b.pre = make([]uint64, len(bounds))
	for i, s := range bounds {
		b.pre[i] = word8(s[n:])
	}
	return b
}

// word8 is s's first 8 bytes as a big-endian integer, padded with zero
// bytes: word8(a) < word8(b) implies a < b in byte order (and > implies
// >); equal words say nothing.
func word8(s string) uint64 {
	var w uint64
	for i := range 8 {
		w <<= 8
		if i < len(s) {
			w |= uint64(s[i])
		}
	}
	return w
}

// of returns bucketOf(b.bounds, k).
func (b *bucketer) of(k string) int {
	n := len(b.bounds)
	if n == 0 {
		return 0
	}
	p := len(b.prefix)
	kp := k[:min(p, len(k))]
	if kp != b.prefix {
		// Every bound starts with prefix: k is below all or above all.
		if kp < b.prefix {
			return 0
		}
		return n
	}
	w := word8(k[p:])
	lo, hi := 0, n // bounds[:lo] have words below w
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.pre[m] < w {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == n || b.pre[lo] != w {
		return lo
	}
	// bounds[lo:end] have k's word: compare them whole.
	end := lo + sort.Search(n-lo, func(i int) bool { return b.pre[lo+i] > w })
	return lo + sort.Search(end-lo, func(i int) bool { return b.bounds[lo+i] > k })
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
//
// The steps: draw the first ranges' bounds from the expected keys; sum
// the whole store by those ranges while the expected side is hashed
// (firstSums); keep the ranges whose sums differ (differing); split
// those that hold many rows and sum their parts again until each is
// small (bisect); read the rows of what is left and judge them as rows
// does (readLeaves).
func compareSums(ctx context.Context, s store.Store, sm store.Summer, expected map[string]any, c Config, fn func(Drift) error) (st Stats, err error, done bool) {
	layout, err := sm.SumLayout(ctx)
	if errors.Is(err, store.ErrNoSums) {
		return st, nil, false
	}
	if err != nil {
		return Stats{Keys: int64(len(expected))}, err, true
	}
	r := &sumsRun{
		sm: sm, expected: expected, t: tuning, layout: layout,
		// A seed of its own for each comparison: a store cannot be made
		// to keep its sums by rows chosen in advance.
		seed: rand.Uint64(),
	}
	bounds := firstBounds(expected, r.t)
	hd, sums, err := r.firstSums(ctx, bounds)
	if err != nil {
		return Stats{Keys: int64(len(expected))}, err, true
	}
	ranges, matched, ok := r.differing(bounds, hd, sums)
	if !ok {
		return Stats{SumQueries: 1}, nil, false
	}
	j := newJudge(expected, &c, fn, countKeys(ranges))
	j.st.SumQueries = 1
	j.st.Matched += matched
	j.st.Summed = matched
	leaves, err := r.bisect(ctx, ranges, &j.st)
	if err != nil {
		return j.st, err, true
	}
	return j.st, r.readLeaves(ctx, j, leaves), true
}

// sumsRun is one comparison by sums: the store, the expected values, the
// sizing, how rows are written and the seed they are hashed with.
type sumsRun struct {
	sm       store.Summer
	expected map[string]any
	t        sumTuning
	layout   store.SumLayout
	seed     uint64
}

// firstBounds returns the bounds of the first ranges, which cover every
// key: about one per t.bucketKeys expected keys, drawn from a sample of
// the keys. A map's order has nothing to do with the keys' order, so its
// first keys are a fair sample.
func firstBounds(expected map[string]any, t sumTuning) []string {
	n := len(expected)
	k := min(max(n/t.bucketKeys, 1), t.maxBuckets)
	if k <= 1 {
		return nil
	}
	sample := make([]string, 0, min(n, 16*k))
	for key := range expected {
		if len(sample) == cap(sample) {
			break
		}
		sample = append(sample, key)
	}
	slices.Sort(sample)
	var bounds []string
	for i := 1; i < k; i++ {
		bounds = append(bounds, sample[i*len(sample)/k])
	}
	return slices.Compact(bounds)
}

// firstSums sums the whole store by the ranges of bounds, and hashes the
// expected side into the same ranges meanwhile.
func (r *sumsRun) firstSums(ctx context.Context, bounds []string) (*hashed, []store.RangeSum, error) {
	var sums []store.RangeSum
	var sumErr error
	var wg sync.WaitGroup
	wg.Go(func() { sums, sumErr = r.sm.Sums(ctx, nil, bounds, r.seed) })
	h, err := hashAll(ctx, r.expected, &hasher{layout: r.layout, seed: r.seed}, bounds)
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	if sumErr != nil {
		return nil, nil, sumErr
	}
	return h, sums, nil
}

// differing returns the ranges of bounds whose sums differ, each with its
// expected keys (sorted), and the number of expected keys in the others,
// which agree. ok is false when the ranges that differ hold so many keys
// that reading every row is cheaper.
func (r *sumsRun) differing(bounds []string, hd *hashed, sums []store.RangeSum) (ranges []sumRange, matched int64, ok bool) {
	acc := hd.acc
	differ := make([]bool, len(acc))
	var differKeys int64
	for i := range acc {
		if !acc[i].equals(sums[i]) {
			differ[i] = true
			differKeys += max(acc[i].rows, sums[i].Rows)
		}
	}
	n := len(r.expected)
	if float64(differKeys) > r.t.fallback*float64(n) && differKeys > int64(r.t.leafRows) {
		return nil, 0, false
	}
	var keys []string
	switch {
	case differKeys == 0:
	case hd.keys != nil:
		for w, ks := range hd.keys {
			for i, b := range hd.buckets[w] {
				if differ[b] {
					keys = append(keys, ks[i])
				}
			}
		}
		bk := newBucketer(bounds)
		for _, key := range hd.deleted {
			if differ[bk.of(key)] {
				keys = append(keys, key)
			}
		}
	default:
		bk := newBucketer(bounds)
		for key := range r.expected {
			if differ[bk.of(key)] {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	for i := range acc {
		if !differ[i] {
			continue
		}
		kr := store.KeyRange{Open: i == len(bounds)}
		if i > 0 {
			kr.Lo = bounds[i-1]
		}
		if !kr.Open {
			kr.Hi = bounds[i]
		}
		ranges = append(ranges, sumRange{r: kr, keys: keysIn(keys, kr), storeRows: sums[i].Rows})
	}
	return ranges, int64(n - len(keys)), true
}

// keysIn returns the keys of sorted keys within kr.
func keysIn(keys []string, kr store.KeyRange) []string {
	lo := sort.SearchStrings(keys, kr.Lo)
	hi := len(keys)
	if !kr.Open {
		hi = sort.SearchStrings(keys, kr.Hi)
	}
	return keys[lo:hi]
}

// countKeys returns the number of expected keys of ranges.
func countKeys(ranges []sumRange) int {
	n := 0
	for _, r := range ranges {
		n += len(r.keys)
	}
	return n
}

// bisect splits each range that holds more than t.leafRows rows on
// either side in t.fanout parts, sums the parts of all of them in one
// query, and goes on with the parts that differ, until every range left
// is small: those are returned, to be read. It counts the sum queries
// and the keys of agreeing parts on st.
func (r *sumsRun) bisect(ctx context.Context, ranges []sumRange, st *Stats) (leaves []sumRange, err error) {
	for len(ranges) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var split []sumRange
		for _, sr := range ranges {
			if max(int64(len(sr.keys)), sr.storeRows) <= int64(r.t.leafRows) || len(sr.keys) < 2 {
				leaves = append(leaves, sr)
			} else {
				split = append(split, sr)
			}
		}
		if len(split) == 0 {
			break
		}
		within, bounds, parts := r.cut(split)
		sums, err := r.sm.Sums(ctx, within, bounds, r.seed)
		if err != nil {
			return nil, err
		}
		st.SumQueries++
		ranges = r.partsThatDiffer(parts, bounds, sums, st)
	}
	return leaves, nil
}

// cut splits each of ranges at t.fanout-1 keys of its own, and returns
// the ranges (to sum within), the bounds of their parts for one query,
// and the parts.
func (r *sumsRun) cut(ranges []sumRange) (within []store.KeyRange, bounds []string, parts []sumRange) {
	for _, sr := range ranges {
		within = append(within, sr.r)
		cuts := []string{sr.r.Lo}
		for i := 1; i < r.t.fanout; i++ {
			cuts = append(cuts, sr.keys[i*len(sr.keys)/r.t.fanout])
		}
		cuts = slices.Compact(cuts)
		for i, lo := range cuts {
			p := store.KeyRange{Lo: lo, Hi: sr.r.Hi, Open: sr.r.Open}
			if i+1 < len(cuts) {
				p.Hi, p.Open = cuts[i+1], false
			}
			parts = append(parts, sumRange{r: p, keys: keysIn(sr.keys, p)})
		}
		bounds = append(bounds, cuts...)
		if !sr.r.Open {
			bounds = append(bounds, sr.r.Hi)
		}
	}
	return within, slices.Compact(bounds), parts
}

// partsThatDiffer hashes each part's expected rows and returns the parts
// whose sums (by the bounds of one query) differ; the keys of the others
// are counted as matched and summed on st.
func (r *sumsRun) partsThatDiffer(parts []sumRange, bounds []string, sums []store.RangeSum, st *Stats) []sumRange {
	h := &hasher{layout: r.layout, seed: r.seed}
	var out []sumRange
	for _, p := range parts {
		var a rangeAcc
		for _, key := range p.keys {
			if v := r.expected[key]; v != nil {
				if x, ok := h.hash(key, v); ok {
					a.add(x)
				} else {
					a.forced = true
				}
			}
		}
		sum := sums[bucketOf(bounds, p.r.Lo)]
		if a.equals(sum) {
			st.Matched += int64(len(p.keys))
			st.Summed += int64(len(p.keys))
			continue
		}
		p.storeRows = sum.Rows
		out = append(out, p)
	}
	return out
}

// readLeaves reads the rows of leaves and judges them with j, then
// reports the expected keys of leaves that no row had.
func (r *sumsRun) readLeaves(ctx context.Context, j *judge, leaves []sumRange) error {
	if len(leaves) == 0 {
		return nil
	}
	within := make([]store.KeyRange, len(leaves))
	for i, l := range leaves {
		within[i] = l.r
	}
	if err := r.sm.ScanRanges(ctx, within, j.row); err != nil {
		return err
	}
	var missing []string
	for _, l := range leaves {
		for _, key := range l.keys {
			if j.seen.has(key) {
				continue
			}
			if r.expected[key] == nil {
				j.st.Matched++
				continue
			}
			missing = append(missing, key)
		}
	}
	return j.missing(ctx, missing)
}

// hashed is the expected side of the first sums: each range's
// accumulator, and each key (not deleted) with its range, in no order,
// so that the keys of the ranges that differ are found without reading
// every key's bytes again (for 10M keys, a cache miss each: seconds).
type hashed struct {
	acc     []rangeAcc
	keys    [][]string // by worker
	buckets [][]uint16 // buckets[w][i] is the range of keys[w][i]
	deleted []string   // the keys not hashed (deleted), whose ranges are not recorded
}

// maxRecordedBuckets: with more ranges, hashAll records no keys (their
// range would not fit a uint16) and differing finds them again. Tests
// set it to 0 to take that path.
var maxRecordedBuckets = 1 << 16

// hashAll hashes every expected row into the bucket of its key among
// bounds, on every core: this goroutine walks the map and hands batches
// of rows to one worker per core, and takes them back for reuse.
func hashAll(ctx context.Context, expected map[string]any, proto *hasher, bounds []string) (*hashed, error) {
	type pair struct {
		k string
		v any
	}
	const size = 1024
	workers := max(runtime.GOMAXPROCS(0), 1)
	batches := make(chan []pair, 2*workers)
	free := make(chan []pair, 4*workers)
	bk := newBucketer(bounds)
	accs := make([][]rangeAcc, workers)
	record := len(bounds)+1 <= maxRecordedBuckets
	out := &hashed{keys: make([][]string, workers), buckets: make([][]uint16, workers)}
	var wg sync.WaitGroup
	for w := range workers {
		accs[w] = make([]rangeAcc, len(bounds)+1)
		acc := accs[w]
		if record {
			out.keys[w] = make([]string, 0, len(expected)/workers+size)
			out.buckets[w] = make([]uint16, 0, len(expected)/workers+size)
		}
		wg.Go(func() {
			h := &hasher{layout: proto.layout, seed: proto.seed}
			for batch := range batches {
				for _, p := range batch {
					b := bk.of(p.k)
					if record {
						out.keys[w] = append(out.keys[w], p.k)
						out.buckets[w] = append(out.buckets[w], uint16(b))
					}
					a := &acc[b]
					if x, ok := h.hash(p.k, p.v); ok {
						a.add(x)
					} else {
						a.forced = true
					}
				}
				select {
				case free <- batch[:0]:
				default:
				}
			}
		})
	}
	next := func() []pair {
		select {
		case b := <-free:
			return b
		default:
			return make([]pair, 0, size)
		}
	}
	batch := next()
	var err error
	for k, v := range expected {
		if v == nil {
			// Deleted: the store must not hold it, or (deleted: null)
			// may.
			if record {
				out.deleted = append(out.deleted, k)
			}
			continue
		}
		batch = append(batch, pair{k, v})
		if len(batch) == size {
			if err = ctx.Err(); err != nil {
				break
			}
			batches <- batch
			batch = next()
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
	out.acc = acc
	if !record {
		out.keys, out.buckets, out.deleted = nil, nil, nil
	}
	return out, nil
}

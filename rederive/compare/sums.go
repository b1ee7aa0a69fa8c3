package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/auditd/auditd/rederive/store"
)

// sumTuning sizes the buckets of method sums.
type sumTuning struct {
	// bucketKeys is about the number of expected keys per bucket (their
	// number is a power of two), maxBits bounds the buckets to 2^maxBits.
	bucketKeys, maxBits int
	// fallback: when the buckets that differ hold more than this fraction
	// of the expected keys, every row is read instead.
	fallback float64
}

// The store's hash aggregate runs fastest when its groups fit in the
// processor's cache: grouping 10M rows took one PostgreSQL process 3.6 to
// 4.1 s of CPU in 16,384 buckets, 2.7 to 2.8 s in 4,096, 2.3 to 2.4 s in
// 1,024. With 2,048 keys or more a bucket, 10M keys make 4,096 buckets,
// and a differing one reads about 2,400 rows.
var defaultSumTuning = sumTuning{bucketKeys: 2048, maxBits: 16, fallback: 0.1}

// tuning is the sizing in effect; tests make it small.
var tuning = defaultSumTuning

// sumBits returns the bits of the buckets for n expected keys: at least
// t.bucketKeys keys per bucket, fewer than twice as many.
func sumBits(n int, t sumTuning) int {
	k := n / max(t.bucketKeys, 1)
	if k <= 1 {
		return 0
	}
	return min(bits.Len(uint(k))-1, t.maxBits, store.MaxSumBits)
}

// bucketAcc is the expected side of a bucket: its number of rows (keys
// not deleted), the 128-bit sum of their hashes, and whether a key in it
// has a value that writes no canonical text (the bucket is then read row
// by row).
type bucketAcc struct {
	rows   int64
	hi, lo uint64
	forced bool
}

// add adds a signed 64-bit hash (as its bits).
func (a *bucketAcc) add(h uint64) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, h, 0)
	a.hi += carry
	if int64(h) < 0 {
		a.hi-- // sign extension: + (2^64 - 1)·2^64
	}
	a.rows++
}

func (a *bucketAcc) merge(b bucketAcc) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, b.lo, 0)
	a.hi += b.hi + carry
	a.rows += b.rows
	a.forced = a.forced || b.forced
}

// equals reports whether the store's sum of a bucket is the expected one.
func (a bucketAcc) equals(s store.BucketSum) bool {
	return !a.forced && a.rows == s.Rows && a.hi == s.Hi && a.lo == s.Lo
}

// hasher writes expected rows' value text (see package store) and
// hashes them.
type hasher struct {
	layout store.SumLayout
	seed   uint64
	buf    []byte
}

// hash returns the key hash of key and the hash of the row key, v; ok
// is false when v writes no canonical text (a timestamp, a list, a float
// NaN, a map whose fields are not the store's columns).
func (h *hasher) hash(key string, v any) (kh, rh uint64, ok bool) {
	kh = store.KeyHash(key, h.seed)
	b := h.buf[:0]
	ok = true
	switch {
	case h.layout.Numeric:
		b, ok = appendScalar(b, v)
		h.buf = b
		// Only a number "n<plain>;" can equal a numeric column's value.
		if !ok || len(b) < 3 || b[0] != 'n' {
			return kh, 0, false
		}
		plain, seed := b[1:len(b)-1], kh
		if plain[0] == '-' {
			plain, seed = plain[1:], kh^1
		}
		rh, ok = store.HashNumeric(plain, seed)
		return kh, rh, ok
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
		return kh, 0, false
	}
	return kh, store.HashText(b, kh), true
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
		if plainDecimal(string(v)) {
			b = append(b, 'n')
			b = append(b, v...)
			return append(b, ';'), true
		}
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

// plainDecimal reports whether s is a number in plain decimal as
// appendPlain writes it (an optional "-", an integer part without leading
// zeros, and an optional point and fraction not ending in 0; not "-0"),
// short enough for parseDecimal's bounds: appendScalar then writes s as
// it is, without parsing it.
func plainDecimal(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	i := 0
	if s[0] == '-' {
		i++
	}
	switch {
	case i == len(s):
		return false
	case s[i] == '0':
		i++
		if i == len(s) {
			return i == 1 // "0", not "-0"
		}
	case '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == len(s) {
			return true
		}
	default:
		return false
	}
	if s[i] != '.' || i+1 == len(s) || s[len(s)-1] == '0' {
		return false
	}
	for i++; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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

// compareSums compares by sums over buckets of keys, as Config.Method
// describes. done is false when the store cannot sum its rows, or the
// sums differ in so many buckets that reading every row is cheaper: the
// caller then reads every row.
//
// The steps: sum the whole store by bucket of key hash while the
// expected side is hashed into the same buckets (firstSums); keep the
// keys of the buckets whose sums differ (differing); read those keys'
// rows, and the rows of the buckets that hold more rows than were found
// (the store's extra keys), and judge them as rows does (read).
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
		bits: sumBits(len(expected), tuning),
		// A seed of its own for each comparison: a store cannot be made
		// to keep its sums by rows chosen in advance.
		seed: rand.Uint64(),
	}
	hd, sums, err := r.firstSums(ctx)
	if err != nil {
		return Stats{Keys: int64(len(expected))}, err, true
	}
	keys, differ, ok := r.differing(hd, sums)
	if !ok {
		return Stats{SumQueries: 1}, nil, false
	}
	j := newJudge(expected, &c, fn, len(keys))
	j.st.SumQueries = 1
	j.st.Matched = int64(len(expected) - len(keys))
	j.st.Summed = j.st.Matched
	return j.st, r.read(ctx, j, keys, differ, sums), true
}

// sumsRun is one comparison by sums: the store, the expected values, the
// sizing, how rows are written, the buckets' bits and the seed.
type sumsRun struct {
	sm       store.Summer
	expected map[string]any
	t        sumTuning
	layout   store.SumLayout
	bits     int
	seed     uint64
}

// bucket returns key's bucket.
func (r *sumsRun) bucket(key string) uint64 {
	return store.KeyBucket(store.KeyHash(key, r.seed), r.bits)
}

// firstSums sums the whole store by bucket, and hashes the expected side
// into the same buckets meanwhile.
func (r *sumsRun) firstSums(ctx context.Context) (*hashed, []store.BucketSum, error) {
	var sums []store.BucketSum
	var sumErr error
	var wg sync.WaitGroup
	wg.Go(func() { sums, sumErr = r.sm.Sums(ctx, r.bits, r.seed) })
	h, err := hashAll(ctx, r.expected, &hasher{layout: r.layout, seed: r.seed}, r.bits)
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	if sumErr != nil {
		return nil, nil, sumErr
	}
	if len(sums) != len(h.acc) {
		return nil, nil, fmt.Errorf("%w: sums: %d buckets, want %d", store.ErrStore, len(sums), len(h.acc))
	}
	return h, sums, nil
}

// differing returns the expected keys (deleted ones included) of the
// buckets whose sums differ, and which buckets differ. ok is false when
// those buckets hold so many keys that reading every row is cheaper.
func (r *sumsRun) differing(hd *hashed, sums []store.BucketSum) (keys []string, differ []bool, ok bool) {
	acc := hd.acc
	differ = make([]bool, len(acc))
	var differKeys int64
	for i := range acc {
		if !acc[i].equals(sums[i]) {
			differ[i] = true
			differKeys += max(acc[i].rows, sums[i].Rows)
		}
	}
	n := len(r.expected)
	if float64(differKeys) > r.t.fallback*float64(n) && differKeys > int64(r.t.bucketKeys) {
		return nil, nil, false
	}
	switch {
	case differKeys == 0:
	case hd.keys != nil:
		for i, b := range hd.buckets {
			if differ[b] {
				keys = append(keys, hd.keys[i])
			}
		}
		for _, key := range hd.deleted {
			if differ[r.bucket(key)] {
				keys = append(keys, key)
			}
		}
	default:
		for key := range r.expected {
			if differ[r.bucket(key)] {
				keys = append(keys, key)
			}
		}
	}
	return keys, differ, true
}

// scanKeysChunk bounds the keys of one ScanKeys call.
const scanKeysChunk = 50_000

// read reads the rows of keys, the expected keys of the buckets that
// differ, and judges them with j; then reads the rows of the buckets
// that differ and hold more rows than keys found, which hold keys not
// expected, and judges those; then reports the keys no row had.
func (r *sumsRun) read(ctx context.Context, j *judge, keys []string, differ []bool, sums []store.BucketSum) error {
	if len(keys) == 0 && !anyTrue(differ) {
		return nil
	}
	want := newKeySet(len(keys))
	for _, k := range keys {
		want.add(k)
	}
	found := make(map[uint64]int64)
	for rest := keys; len(rest) > 0; {
		chunk := rest[:min(len(rest), scanKeysChunk)]
		rest = rest[len(chunk):]
		err := r.sm.ScanKeys(ctx, chunk, func(row store.Row) error {
			if !want.has(row.Key) {
				j.st.Rows++
				return nil // equal under the store's collation only
			}
			found[r.bucket(row.Key)]++
			return j.row(row)
		})
		if err != nil {
			return err
		}
	}
	var extra []uint64
	for b, d := range differ {
		if d && sums[b].Rows > found[uint64(b)] {
			extra = append(extra, uint64(b))
		}
	}
	if len(extra) > 0 {
		err := r.sm.ScanBuckets(ctx, r.bits, r.seed, extra, func(row store.Row) error {
			if want.has(row.Key) {
				j.st.Rows++
				return nil // read above
			}
			return j.row(row)
		})
		if err != nil {
			return err
		}
	}
	var missing []string
	for _, key := range keys {
		if j.seen.has(key) {
			continue
		}
		if r.expected[key] == nil {
			j.st.Matched++
			continue
		}
		missing = append(missing, key)
	}
	slices.Sort(missing)
	return j.missing(ctx, missing)
}

func anyTrue(bs []bool) bool {
	return slices.Contains(bs, true)
}

// hashed is the expected side of the first sums: each bucket's
// accumulator, and each key (not deleted) with its bucket, in no order,
// so that the keys of the buckets that differ are found without reading
// every key's bytes again (for 10M keys, a cache miss each: seconds).
type hashed struct {
	acc     []bucketAcc
	keys    []string // nil when not recorded
	buckets []uint16 // buckets[i] is the bucket of keys[i]
	deleted []string // the keys not hashed (deleted), whose buckets are not recorded
}

// maxRecordedBuckets: with more buckets, hashAll records no keys (their
// bucket would not fit a uint16) and differing finds them again. Tests
// set it to 0 to take that path.
var maxRecordedBuckets = 1 << 16

// batchPair is an expected row in a batch of hashAll.
type batchPair struct {
	k string
	v any
}

// hashBatch is a batch of expected rows for a worker of hashAll: the
// rows, and where they start among the recorded keys.
type hashBatch struct {
	pairs []batchPair
	at    int
}

// touch reads a byte of each key and string value of batch, all at once:
// the processor then waits for their cache misses together (they do not
// depend on each other) instead of one by one as the hashing reaches
// them. It returns the bytes' sum, for the compiler to keep the reads.
func touch(batch []batchPair) byte {
	var sink byte
	for _, p := range batch {
		if len(p.k) > 0 {
			sink += p.k[0]
		}
		switch v := p.v.(type) {
		case json.Number:
			if len(v) > 0 {
				sink += v[0]
			}
		case string:
			if len(v) > 0 {
				sink += v[0]
			}
		}
	}
	return sink
}

// hashAll hashes every expected row into its bucket among 2^nbits, on
// every core: this goroutine walks the map, records the keys, and hands
// batches of rows to one worker per core, which record their buckets;
// it takes the batches back for reuse.
func hashAll(ctx context.Context, expected map[string]any, proto *hasher, nbits int) (*hashed, error) {
	const size = 1024
	workers := max(runtime.GOMAXPROCS(0), 1)
	batches := make(chan hashBatch, 2*workers)
	free := make(chan []batchPair, 4*workers)
	nb := 1 << nbits
	mask := uint64(nb - 1)
	accs := make([][]bucketAcc, workers)
	out := &hashed{}
	record := nb <= maxRecordedBuckets
	if record {
		out.keys = make([]string, len(expected))
		out.buckets = make([]uint16, len(expected))
	}
	var wg sync.WaitGroup
	sinks := make([]byte, workers)
	for w := range workers {
		accs[w] = make([]bucketAcc, nb)
		acc := accs[w]
		wg.Go(func() {
			h := &hasher{layout: proto.layout, seed: proto.seed}
			for batch := range batches {
				sinks[w] += touch(batch.pairs)
				for i, p := range batch.pairs {
					kh, x, ok := h.hash(p.k, p.v)
					b := kh & mask
					if record {
						out.buckets[batch.at+i] = uint16(b)
					}
					a := &acc[b]
					if ok {
						a.add(x)
					} else {
						a.forced = true
					}
				}
				select {
				case free <- batch.pairs[:0]:
				default:
				}
			}
		})
	}
	next := func() []batchPair {
		select {
		case b := <-free:
			return b
		default:
			return make([]batchPair, 0, size)
		}
	}
	batch := hashBatch{pairs: next()}
	n := 0 // keys recorded
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
		if record {
			out.keys[n] = k
		}
		n++
		batch.pairs = append(batch.pairs, batchPair{k, v})
		if len(batch.pairs) == size {
			if err = ctx.Err(); err != nil {
				break
			}
			batches <- batch
			batch = hashBatch{pairs: next(), at: n}
		}
	}
	if len(batch.pairs) > 0 && err == nil {
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
	if record {
		out.keys, out.buckets = out.keys[:n], out.buckets[:n]
	}
	return out, nil
}

package store

import (
	"context"
	"errors"
)

// A store that can hash its rows where it keeps them (PostgreSQL) lets a
// comparison check a bucket of keys by one number instead of reading its
// rows: the store sums a hash of each row over the bucket, the comparison
// sums the same hash over the expected values, and only the buckets whose
// sums differ are read (package compare). For the two sums to agree, both
// sides write a row the same way; this is that text and that hash.
//
// A row's value text is:
//
//   - with one value column, the column's scalar text;
//   - with several, for each value column in the byte order of the
//     names: "c", the name's length in bytes, ":", the name, the
//     column's scalar text;
//   - with none, the empty text.
//
// A scalar's text is "Z" for NULL; "T" or "F" for a boolean; for a number
// (an integer or numeric column), "n", the number in plain decimal
// without exponent, leading zeros, trailing zeros after the point, or a
// point with nothing after it (-0 is "0"), and ";"; for a string, "s",
// its length in bytes, ":" and the string (text and varchar columns, and
// those whose values the store reads as their text: uuid, date, time,
// interval, inet, cidr, macaddr). Every other column type (real, double
// precision, numeric NaN and infinities, timestamps, json, arrays,
// bytea, char(n), enums) writes "?", which no expected value writes, so a
// bucket holding one is always read row by row.
//
// With a seed drawn at random for each comparison, a row's key hash is
// PostgreSQL's hashtextextended of its key's text in UTF-8 with the seed
// (KeyHash), its bucket among 2^bits the key hash's low bits
// (KeyBucket), and its hash hashtextextended of its value text with the
// key hash as the seed: a signed 64-bit integer. HashText computes
// hashtextextended in Go. A bucket's sum is the sum of its rows' hashes,
// exactly (no wrap-around), with the number of rows. A key's bucket does
// not depend on its value: the store's row of a key and the expected one
// fall in the same bucket.
//
// The hash is not cryptographic: a sum that agrees says the bucket holds
// the expected rows unless they differ by accident with odds of about
// 2^-64, or were changed on purpose by someone who knew the run's seed.
// The full comparison (method rows) reads every row and has no such
// limit.

// KeyHash is the key hash of key under seed.
func KeyHash(key string, seed uint64) uint64 { return HashString(key, seed) }

// KeyBucket is the bucket among 2^bits of a key hash.
func KeyBucket(keyHash uint64, bits int) uint64 { return keyHash & (1<<bits - 1) }

// BucketSum is a bucket's row count and the exact sum of its rows'
// signed 64-bit hashes, as a 128-bit two's complement integer
// Hi·2^64 + Lo.
type BucketSum struct {
	Rows   int64
	Hi, Lo uint64
}

// SumLayout is how a store writes its rows' value text, which the
// expected side must follow: the value columns' names, in the order
// their text is written (with Single, the one value column is written
// bare). With Numeric (and Single), the one value column is numeric and
// a row's hash is not that of its text but, cheaper for the store,
// HashNumeric of the value's absolute value with the key hash as the seed
// (the key hash XOR 1 for a negative value), or for NULL the hash of "Z"
// with the key hash as the seed. (NaN and the infinities hash as the key
// hash or the key hash XOR 1, which no finite number does but by chance.)
type SumLayout struct {
	Single  bool
	Numeric bool
	Columns []string
}

// MaxSumBits bounds the bits of a Sums or ScanBuckets call.
const MaxSumBits = 20

// Summer is a store that sums row hashes by bucket of keys in place, and
// reads only the rows of given buckets or keys.
type Summer interface {
	// SumLayout returns how the store writes its rows, or an error
	// wrapping ErrNoSums when its key or value columns cannot be summed
	// (a key that is no text, integer, numeric or uuid; a value column
	// every row of which would write "?"; a database not in UTF-8; a
	// server whose hash differs from HashText's).
	SumLayout(ctx context.Context) (SumLayout, error)
	// Sums sums every row by its bucket among 2^bits (0 <= bits <=
	// MaxSumBits) under seed: the result has 2^bits sums, that of
	// bucket b at index b.
	Sums(ctx context.Context, bits int, seed uint64) ([]BucketSum, error)
	// ScanBuckets calls fn with each row whose key's bucket among 2^bits
	// under seed is one of buckets, as Scan does. It may read every row
	// to find them.
	ScanBuckets(ctx context.Context, bits int, seed uint64, buckets []uint64, fn func(Row) error) error
	KeyReader
}

// ErrNoSums marks a store that cannot sum its rows: the comparison reads
// every row instead.
var ErrNoSums = errors.New("rederive: store cannot sum its rows")

// KeyReader is a store that reads the rows of given keys only.
type KeyReader interface {
	// ScanKeys calls fn with the row of each of keys the store holds, as
	// Scan does, in any order. It may also return rows of other keys
	// (equal under the store's collation): the caller filters them.
	ScanKeys(ctx context.Context, keys []string, fn func(Row) error) error
}

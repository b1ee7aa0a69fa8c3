package store

import (
	"context"
	"errors"
)

// A store that can hash its rows where it keeps them (PostgreSQL) lets a
// comparison check a key range by one number instead of reading its rows:
// the store sums a hash of each row's canonical text over the range, the
// comparison sums the same hash over the expected values, and only the
// ranges whose sums differ are read (package compare). For the two sums
// to agree, both sides write a row the same way; this is that text.
//
// A row's canonical text is its key's length in bytes in decimal, ":",
// the key, then its value:
//
//   - with one value column, the column's scalar text;
//   - with several, for each value column in the byte order of the
//     names: "c", the name's length in bytes, ":", the name, the
//     column's scalar text;
//   - with none, nothing.
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
// range holding one is always read row by row.
//
// A row's hash is PostgreSQL's hashtextextended of its canonical text in
// UTF-8 with a seed drawn at random for each comparison (HashText computes
// it in Go), a signed 64-bit integer, and a range's sum is the sum of its
// rows' hashes, exactly (no wrap-around), with the number of rows. Keys
// are ordered by their bytes (PostgreSQL's collation "C").
//
// The hash is not cryptographic: a sum that agrees says the range holds
// the expected rows unless they differ by accident with odds of about
// 2^-64, or were changed on purpose by someone who knew the run's seed.
// The full comparison (method rows) reads every row and has no such
// limit.

// KeyRange is the keys k with Lo <= k < Hi in byte order, or Lo <= k
// when Open is set.
type KeyRange struct {
	Lo, Hi string
	Open   bool
}

// Contains reports whether k is in r.
func (r KeyRange) Contains(k string) bool {
	return k >= r.Lo && (r.Open || k < r.Hi)
}

// RangeSum is a key range's row count and the exact sum of its rows'
// signed 64-bit hashes, as a 128-bit two's complement integer
// Hi·2^64 + Lo.
type RangeSum struct {
	Rows   int64
	Hi, Lo uint64
}

// SumLayout is how a store writes its rows' canonical text, which the
// expected side must follow: the value columns' names, in the order
// their text is written (with Single, the one value column is written
// bare).
type SumLayout struct {
	Single  bool
	Columns []string
}

// Summer is a store that sums row hashes over key ranges in place, and
// reads only the rows of given key ranges. The ranges a call names are
// disjoint and sorted.
type Summer interface {
	// SumLayout returns how the store writes its rows, or an error
	// wrapping ErrNoSums when its key or value columns cannot be summed
	// (a key that is no text, integer, numeric or uuid; a value column
	// every row of which would write "?"; a database not in UTF-8; a
	// server whose hash differs from HashText's).
	SumLayout(ctx context.Context) (SumLayout, error)
	// Sums sums the rows whose keys are within one of the ranges (all
	// rows when within is nil) by bucket: bucket 0 holds the keys below
	// bounds[0], bucket i those in [bounds[i-1], bounds[i]), bucket
	// len(bounds) those at or above the last bound. bounds is sorted and
	// holds no key twice. The result has len(bounds)+1 entries.
	// Rows are hashed with seed.
	Sums(ctx context.Context, within []KeyRange, bounds []string, seed uint64) ([]RangeSum, error)
	// ScanRanges calls fn with each row whose key is within one of the
	// ranges, as Scan does.
	ScanRanges(ctx context.Context, ranges []KeyRange, fn func(Row) error) error
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

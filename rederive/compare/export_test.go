package compare

// SetSumTuning sizes method sums' key ranges for a test (small ranges, so
// a few hundred keys split, bisect and read), and returns a func that
// restores the default. fallback 1 never falls back to reading every row.
func SetSumTuning(bucketKeys, leafRows, fanout int, fallback float64) (restore func()) {
	old := tuning
	tuning = sumTuning{bucketKeys: bucketKeys, maxBuckets: 1 << 14, leafRows: leafRows, fanout: fanout, fallback: fallback}
	return func() { tuning = old }
}

// RecordNoKeys makes the first sums record no keys' ranges, so that the
// ranges that differ find their keys from the keys' bytes, as with more
// than 65,536 ranges; it returns a func that restores the default.
func RecordNoKeys() (restore func()) {
	old := maxRecordedBuckets
	maxRecordedBuckets = 0
	return func() { maxRecordedBuckets = old }
}

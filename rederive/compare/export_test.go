package compare

// SetSumTuning sizes method sums' key ranges for a test (small ranges, so
// a few hundred keys split, bisect and read), and returns a func that
// restores the default. fallback 1 never falls back to reading every row.
func SetSumTuning(bucketKeys, leafRows, fanout int, fallback float64) (restore func()) {
	old := tuning
	tuning = sumTuning{bucketKeys: bucketKeys, maxBuckets: 1 << 14, leafRows: leafRows, fanout: fanout, fallback: fallback}
	return func() { tuning = old }
}

package compare

// SetSumTuning sizes method sums' buckets for a test (about bucketKeys
// keys per bucket, so a few hundred keys fill several buckets), and
// returns a func that restores the default. fallback 1 never falls back
// to reading every row.
func SetSumTuning(bucketKeys int, fallback float64) (restore func()) {
	old := tuning
	tuning = sumTuning{bucketKeys: bucketKeys, maxBits: 16, fallback: fallback}
	return func() { tuning = old }
}

// RecordNoKeys makes the first sums record no keys' buckets, so that the
// buckets that differ find their keys from the keys' bytes, as with more
// than 65,536 buckets; it returns a func that restores the default.
func RecordNoKeys() (restore func()) {
	old := maxRecordedBuckets
	maxRecordedBuckets = 0
	return func() { maxRecordedBuckets = old }
}

//go:build race

package ingest_test

// raceEnabled: sync.Pool drops a share of what it is given under the race
// detector, so allocation counts mean nothing there.
const raceEnabled = true

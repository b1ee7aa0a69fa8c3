package ledger

import (
	"context"
	"log/slog"
	"testing"

	"github.com/auditd/auditd/merkle"
)

// benchReadLog returns a log of n entries with 256-byte payloads and
// 36-character ids, appended in requests of 4,096, signed and compacted.
func benchReadLog(b *testing.B, n int) *Log {
	b.Helper()
	st := benchStore(b, WithLogger(slog.New(slog.DiscardHandler)))
	l, err := st.CreateLog("reads")
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	const per = 4096
	es := make([]Entry, 0, per)
	for i := 0; i < n; i++ {
		es = append(es, Entry{ID: uuidLike(uint64(i)), Payload: payload, PayloadJSON: true})
		if len(es) == per || i == n-1 {
			if _, err := l.Append(context.Background(), es); err != nil {
				b.Fatal(err)
			}
			es = es[:0]
		}
	}
	// Quiet before measuring: the last checkpoint signed and the
	// memtables compacted, so no background work runs during the reads.
	if _, err := l.WaitCheckpoint(context.Background(), uint64(n)); err != nil {
		b.Fatal(err)
	}
	if err := st.Compact(); err != nil {
		b.Fatal(err)
	}
	return l
}

const benchReadEntries = 100_000

// BenchmarkEntries measures a full Entries scan of a 100k-entry log (leaf
// hashes recomputed and, since issue 8, checked against the level-0 tiles);
// one op is one entry.
func BenchmarkEntries(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	ctx := context.Background()
	b.ResetTimer()
	defer cpuMeter(b)()
	done := 0
	for done < b.N {
		to := uint64(min(benchReadEntries, b.N-done))
		if err := l.Entries(ctx, 0, to, func(*Record) error { return nil }); err != nil {
			b.Fatal(err)
		}
		done += int(to)
	}
}

// BenchmarkScanEntries is BenchmarkEntries for the unchecked bulk read the
// folds use, for comparison.
func BenchmarkScanEntries(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	ctx := context.Background()
	b.ResetTimer()
	defer cpuMeter(b)()
	done := 0
	for done < b.N {
		to := uint64(min(benchReadEntries, b.N-done))
		if err := l.ScanEntries(ctx, 0, to, func(*Record) error { return nil }); err != nil {
			b.Fatal(err)
		}
		done += int(to)
	}
}

// BenchmarkEntry measures point reads of random entries of a 100k-entry log.
func BenchmarkEntry(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	b.ResetTimer()
	defer cpuMeter(b)()
	i := uint64(0)
	for n := 0; n < b.N; n++ {
		i = (i*6364136223846793005 + 1442695040888963407) % benchReadEntries
		if _, err := l.Entry(i); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEntryByID measures lookups of random entries by event id.
func BenchmarkEntryByID(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	b.ResetTimer()
	defer cpuMeter(b)()
	i := uint64(0)
	for n := 0; n < b.N; n++ {
		i = (i*6364136223846793005 + 1442695040888963407) % benchReadEntries
		if _, err := l.EntryByID(uuidLike(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeafInclusion100k measures an unchecked inclusion proof of a
// random leaf in a 100k-entry log at its latest checkpoint.
func BenchmarkLeafInclusion100k(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	cp, err := l.WaitCheckpoint(context.Background(), benchReadEntries)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	defer cpuMeter(b)()
	i := uint64(0)
	for n := 0; n < b.N; n++ {
		i = (i*6364136223846793005 + 1442695040888963407) % benchReadEntries
		if _, _, err := l.LeafInclusion(i, cp.Size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifiedLeafInclusion100k is BenchmarkLeafInclusion100k with the
// proof verified against the signed checkpoint, as the API serves it.
func BenchmarkVerifiedLeafInclusion100k(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	cp, err := l.WaitCheckpoint(context.Background(), benchReadEntries)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	defer cpuMeter(b)()
	i := uint64(0)
	for n := 0; n < b.N; n++ {
		i = (i*6364136223846793005 + 1442695040888963407) % benchReadEntries
		if _, _, err := l.VerifiedLeafInclusion(i, cp.Size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTreeLeaf measures the extra read of a checked point read: the
// tree's hash of a random leaf from its level-0 tile.
func BenchmarkTreeLeaf(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	b.ResetTimer()
	i := uint64(0)
	for n := 0; n < b.N; n++ {
		i = (i*6364136223846793005 + 1442695040888963407) % benchReadEntries
		if _, err := l.treeLeaf(i); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyInclusion measures the check the API adds to a proof it
// serves: merkle.VerifyInclusion of a 17-hash audit path.
func BenchmarkVerifyInclusion(b *testing.B) {
	l := benchReadLog(b, benchReadEntries)
	cp := l.Checkpoint()
	leaf, p, err := l.LeafInclusion(12345, cp.Size)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if err := merkle.VerifyInclusion(12345, cp.Size, leaf, p, cp.Root); err != nil {
			b.Fatal(err)
		}
	}
}

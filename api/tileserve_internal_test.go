package api

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/auditd/auditd/merkle"
)

func TestAcceptsGzip(t *testing.T) {
	for ae, want := range map[string]bool{
		"":                        false,
		"gzip":                    true,
		"GZIP":                    true,
		"gzip, deflate, br, zstd": true,
		"br, gzip;q=0.5":          true,
		"x-gzip":                  true,
		"*":                       true,
		"identity":                false,
		"deflate, br":             false,
		"gzip;q=0":                false,
		"gzip; q=0.000":           false,
		"gzip;q=0.001":            true,
		"gzips":                   false,
		"identity, *;q=0":         false,
	} {
		if got := acceptsGzip(ae); got != want {
			t.Errorf("Accept-Encoding %q: gzip accepted %v, want %v", ae, got, want)
		}
	}
}

func TestETagMatches(t *testing.T) {
	const strong, weak = `"abc"`, `W/"abc-gzip"`
	for _, c := range []struct {
		inm, etag string
		want      bool
	}{
		{`"abc"`, strong, true},
		{`W/"abc"`, strong, true}, // weak comparison
		{`"x", "abc"`, strong, true},
		{`"x",W/"abc"`, strong, true},
		{`*`, strong, true},
		{`"abd"`, strong, false},
		{`"abc-gzip"`, strong, false},
		{`abc`, strong, false},
		{`"abc`, strong, false},
		{`W/"abc-gzip"`, weak, true},
		{`"abc-gzip"`, weak, true},
		{`"abc"`, weak, false},
		{`"", "x"`, strong, false},
	} {
		if got := etagMatches(c.inm, c.etag); got != c.want {
			t.Errorf("If-None-Match %s against %s: %v, want %v", c.inm, c.etag, got, c.want)
		}
	}
}

// realisticBundle returns a full entry bundle of leaves like a log's:
// uuid-like ids, account keys, nanosecond times a few ms apart, random
// payload hashes, and (kafka) a topic partition's offsets.
func realisticBundle(tb testing.TB, kafka bool) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b []byte
	t0 := int64(1_764_800_000_000_000_000)
	for i := range tileWidth {
		id := make([]byte, 16)
		binary.LittleEndian.PutUint64(id, rng.Uint64())
		binary.LittleEndian.PutUint64(id[8:], rng.Uint64())
		l := merkle.Leaf{
			Log:    "payments-http",
			ID:     fmt.Sprintf("%x-%x-%x-%x-%x", id[:4], id[4:6], id[6:8], id[8:10], id[10:]),
			HasKey: true, Key: fmt.Appendf(nil, "account-%d", rng.IntN(100_000)),
			Time:          t0 + int64(i)*int64(rng.IntN(5_000_000)),
			PayloadSHA256: sha256.Sum256(id),
		}
		if kafka {
			l.Log, l.Source = "payments.3", &merkle.Source{Topic: "payments", Partition: 3, Offset: 81_000_000 + int64(i)}
		}
		lb, err := l.MarshalBinary()
		if err != nil {
			tb.Fatal(err)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(lb)))
		b = append(b, lb...)
	}
	return b
}

// BenchmarkBundleGzip compresses a full entry bundle of realistic leaves at
// the served level and at the default level, and reports the compressed
// size as a share of the bundle's.
func BenchmarkBundleGzip(b *testing.B) {
	for _, kafka := range []bool{false, true} {
		bundle := realisticBundle(b, kafka)
		for _, level := range []int{gzip.BestSpeed, gzip.DefaultCompression} {
			name := fmt.Sprintf("kafka=%v/level=%d", kafka, level)
			b.Run(name, func(b *testing.B) {
				var buf bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&buf, level)
				b.SetBytes(int64(len(bundle)))
				for b.Loop() {
					buf.Reset()
					zw.Reset(&buf)
					zw.Write(bundle)
					zw.Close()
				}
				b.ReportMetric(float64(len(bundle)), "bundle-bytes")
				b.ReportMetric(float64(buf.Len()), "gzip-bytes")
				b.ReportMetric(100*float64(buf.Len())/float64(len(bundle)), "gzip-%")
			})
		}
	}
}

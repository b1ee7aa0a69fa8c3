package loadtest

import (
	"math"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HistQuantile estimates quantile q of the first series of the histogram
// name in g the way Prometheus's histogram_quantile does: linearly within
// the bucket. It is NaN when there is no such histogram or no sample.
func HistQuantile(g prometheus.Gatherer, name string, q float64) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return math.NaN()
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		return BucketQuantile(mf.GetMetric()[0].GetHistogram(), q)
	}
	return math.NaN()
}

// BucketQuantile is HistQuantile of one histogram. Beyond the last finite
// bucket (client_golang leaves the +Inf bucket implicit; an explicit one is
// taken the same way) it returns that bucket's upper bound, as Prometheus
// does.
func BucketQuantile(h *dto.Histogram, q float64) float64 {
	n := float64(h.GetSampleCount())
	if n == 0 {
		return math.NaN()
	}
	bs := slices.Clone(h.GetBucket())
	slices.SortFunc(bs, func(a, b *dto.Bucket) int { return cmpFloat(a.GetUpperBound(), b.GetUpperBound()) })
	rank := q * n
	lower, prev := 0.0, 0.0
	for _, b := range bs {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if math.IsInf(b.GetUpperBound(), 1) {
				return lower
			}
			if c == prev {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-prev)/(c-prev)
		}
		lower, prev = b.GetUpperBound(), c
	}
	return lower
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

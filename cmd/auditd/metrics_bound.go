package main

import (
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// otherLogs is the log label of the series summed past the bound.
const otherLogs = "_other"

// boundLogLabels serves g's metrics with at most max distinct values of the
// label "log" per family: the first max logs by name keep their series, the
// others' counters and gauges are summed into log="_other". A writer that
// creates many logs cannot make /metrics grow without bound.
func boundLogLabels(g prometheus.Gatherer, max int) prometheus.Gatherer {
	if max <= 0 {
		return g
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		for _, mf := range mfs {
			boundFamily(mf, max)
		}
		return mfs, err
	})
}

func boundFamily(mf *dto.MetricFamily, max int) {
	t := mf.GetType()
	if t != dto.MetricType_COUNTER && t != dto.MetricType_GAUGE && t != dto.MetricType_UNTYPED {
		return
	}
	var logs []string
	for _, m := range mf.Metric {
		if v, ok := labelValue(m, "log"); ok && !slices.Contains(logs, v) {
			logs = append(logs, v)
		}
	}
	if len(logs) <= max {
		return
	}
	sort.Strings(logs)
	keep := make(map[string]bool, max)
	for _, l := range logs[:max] {
		keep[l] = true
	}
	kept := mf.Metric[:0]
	other := map[string]*dto.Metric{} // by the other labels
	var order []string
	for _, m := range mf.Metric {
		v, ok := labelValue(m, "log")
		if !ok || keep[v] {
			kept = append(kept, m)
			continue
		}
		var key []string
		for _, lp := range m.Label {
			if lp.GetName() != "log" {
				key = append(key, lp.GetName()+"="+lp.GetValue())
			}
		}
		k := strings.Join(key, ",")
		agg, seen := other[k]
		if !seen {
			agg = proto.Clone(m).(*dto.Metric)
			for _, lp := range agg.Label {
				if lp.GetName() == "log" {
					lp.Value = proto.String(otherLogs)
				}
			}
			other[k] = agg
			order = append(order, k)
			continue
		}
		switch t {
		case dto.MetricType_COUNTER:
			agg.Counter.Value = proto.Float64(agg.Counter.GetValue() + m.Counter.GetValue())
		case dto.MetricType_GAUGE:
			agg.Gauge.Value = proto.Float64(agg.Gauge.GetValue() + m.Gauge.GetValue())
		case dto.MetricType_UNTYPED:
			agg.Untyped.Value = proto.Float64(agg.Untyped.GetValue() + m.Untyped.GetValue())
		}
	}
	for _, k := range order {
		kept = append(kept, other[k])
	}
	mf.Metric = kept
}

func labelValue(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.Label {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

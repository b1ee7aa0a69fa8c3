package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/auditd/auditd", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	in := FromBuildInfo(bi)
	want := Info{Path: "github.com/auditd/auditd", Version: "v1.2.3", Revision: "abc123", Time: "2026-12-01T10:00:00Z", Dirty: true, GoVersion: "go1.26.8"}
	if in != want {
		t.Fatalf("got %+v, want %+v", in, want)
	}
	if s := in.String(); s != "auditd v1.2.3, revision abc123 (dirty), built 2026-12-01T10:00:00Z with go1.26.8" {
		t.Errorf("String() = %q", s)
	}
	// A build from a clone without VCS stamping.
	in = FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/auditd/auditd", Version: "(devel)"}})
	if in.Version != "devel" || in.Revision != "unknown" || in.Dirty {
		t.Errorf("devel build: %+v", in)
	}
}

func TestCollector(t *testing.T) {
	in := Info{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.8"}
	reg := prometheus.NewRegistry()
	prometheus.WrapRegistererWithPrefix("auditd_", reg).MustRegister(in.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "auditd_build_info" || len(mfs[0].Metric) != 1 || mfs[0].Metric[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gathered %v", mfs)
	}
	got := map[string]string{}
	for _, l := range mfs[0].Metric[0].Label {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "revision": "abc123", "dirty": "false", "goversion": "go1.26.8"}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

// Package buildinfo reads what the Go toolchain recorded about the running
// binary (module version, VCS revision and time, dirty flag, Go version) for
// `auditd version` and the auditd_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is the build information of a binary. Fields the toolchain did not
// record are "unknown" (Revision, Time) or "devel" (Version).
type Info struct {
	// Path is the main module's path.
	Path string `json:"path"`
	// Version is the main module's version: a tag such as v1.2.0 for a
	// binary installed with `go install module@version`, a pseudo-version
	// for a build from a clone when the Go toolchain stamps one, else "devel".
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from (vcs.revision).
	Revision string `json:"revision"`
	// Time is the commit's time (vcs.time).
	Time string `json:"time"`
	// Dirty is set when the working tree had uncommitted changes (vcs.modified).
	Dirty bool `json:"dirty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Path: "unknown", Version: "devel", Revision: "unknown", Time: "unknown", GoVersion: runtime.Version()}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts Info from what debug.ReadBuildInfo returned.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Path: bi.Main.Path, Version: bi.Main.Version, Revision: "unknown", Time: "unknown", GoVersion: bi.GoVersion}
	if in.Version == "" || in.Version == "(devel)" {
		in.Version = "devel"
	}
	if in.Path == "" {
		in.Path = "unknown"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Dirty = s.Value == "true"
		}
	}
	return in
}

// String is the one line `auditd version` prints.
func (in Info) String() string {
	dirty := ""
	if in.Dirty {
		dirty = " (dirty)"
	}
	return fmt.Sprintf("auditd %s, revision %s%s, built %s with %s", in.Version, in.Revision, dirty, in.Time, in.GoVersion)
}

// Collector returns the build_info gauge (auditd_build_info once main adds
// the prefix): always 1, with the version, revision, dirty flag and Go
// version as labels, for joining onto other series and spotting mixed
// versions across instances.
func (in Info) Collector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "build_info",
		Help: "Always 1; the labels say which build of auditd is running.",
	}, []string{"version", "revision", "dirty", "goversion"})
	g.WithLabelValues(in.Version, in.Revision, fmt.Sprint(in.Dirty), in.GoVersion).Set(1)
	return g
}

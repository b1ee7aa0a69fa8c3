package rederive

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsForget: a derivation a reload removed loses its series, the
// others keep theirs, and the collectors stay registered (a reload reuses
// them: registering them again would panic).
func TestMetricsForget(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	m.observe(&Report{Derivation: "gone", State: StateClean})
	m.observe(&Report{Derivation: "kept", State: StateClean})
	count := func(name string) int {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		c := 0
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "derivation" && l.GetValue() == name {
						c++
					}
				}
			}
		}
		return c
	}
	if count("gone") == 0 || count("kept") == 0 {
		t.Fatal("no series before Forget")
	}
	keptBefore := count("kept")
	m.Forget("gone")
	if n := count("gone"); n != 0 {
		t.Errorf("%d series of a forgotten derivation", n)
	}
	if n := count("kept"); n != keptBefore {
		t.Errorf("series of the kept derivation: %d, want %d", n, keptBefore)
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(m.Collectors()[0]); !errors.As(err, &are) {
		t.Errorf("collectors not registered any more after Forget: %v", err)
	}
}

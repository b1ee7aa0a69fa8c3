package checkers

import "testing"

// TestClassifyAbsent: an offset the log holds and the broker does not
// return is information below the log start offset (retention) or on a
// compacted topic, and a finding only inside the retained range of a topic
// that is not compacted.
func TestClassifyAbsent(t *testing.T) {
	for _, tc := range []struct {
		offset, start int64
		compacted     bool
		want          string
	}{
		{offset: 5, start: 10, want: resultRetention},
		{offset: 5, start: 10, compacted: true, want: resultRetention},
		{offset: 10, start: 10, compacted: true, want: resultCompacted},
		{offset: 10, start: 10, want: resultMissing},
		{offset: 2000, start: 0, want: resultMissing},
	} {
		if got := classifyAbsent(tc.offset, tc.start, tc.compacted); got != tc.want {
			t.Errorf("classifyAbsent(%d, %d, %v) = %s, want %s", tc.offset, tc.start, tc.compacted, got, tc.want)
		}
	}
}

// TestRereadWindows: a sampled pass's windows are in order, disjoint,
// inside [first, size), and include the suspects; a full pass or a small
// log is one window.
func TestRereadWindows(t *testing.T) {
	draws := []uint64{500, 0, 480}
	c := &KafkaReread{o: KafkaRereadOptions{Windows: 3, Sample: 100, Rand: func(n uint64) uint64 {
		d := draws[0]
		draws = draws[1:]
		return min(d, n-1)
	}}, sus: &suspects{m: map[string]map[uint64]bool{"l": {5000: true, 10: true}}}}
	got := c.windows("l", 100, 4000)
	want := [][2]uint64{{100, 200}, {580, 700}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("windows %v, want %v (suspects 10 and 5000 outside [100, 4000))", got, want)
	}
	c.sus.set("l", 3000, true)
	draws = []uint64{0, 0, 0}
	if got := c.windows("l", 0, 4000); len(got) != 2 || got[1] != [2]uint64{3000, 3001} {
		t.Errorf("windows %v, want [0 100] and the suspect [3000 3001]", got)
	}
	if got := c.windows("l", 0, 300); len(got) != 1 || got[0] != [2]uint64{0, 300} {
		t.Errorf("small log: windows %v, want [0 300]", got)
	}
	c.full = true
	if got := c.windows("l", 7, 40000); len(got) != 1 || got[0] != [2]uint64{7, 40000} {
		t.Errorf("full pass: windows %v, want [7 40000]", got)
	}
}

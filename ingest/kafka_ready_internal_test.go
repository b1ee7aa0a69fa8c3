package ingest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// readyFixture is a source with no client, its partitions and health set
// by hand, to check the readiness rules alone.
func readyFixture(window time.Duration) *Kafka {
	k := &Kafka{cfg: KafkaConfig{Group: "g", StallWindow: window}, m: newKafkaMetrics(),
		parts: map[string]*partition{}, hwm: map[string]int64{}, failed: map[string]error{}, joined: true}
	return k
}

func (k *Kafka) addTestPartition(name string, next, readTo int64, progressAt time.Time) *partition {
	p := &partition{k: k, name: name, topic: "t", pos: Position{Topic: "t", Next: next}, readTo: readTo, progressAt: progressAt}
	k.parts[name] = p
	return p
}

// TestKafkaStallRules: a partition is stalled only while the broker has
// records past what it read and it made no progress for the stall window;
// the window starts at its latest progress or the latest moment it had
// nothing to read.
func TestKafkaStallRules(t *testing.T) {
	const window = 10 * time.Second
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Minute)
	recent := now.Add(-window / 2)
	cases := []struct {
		name         string
		next, readTo int64
		hwm          int64 // -1: not known
		progressAt   time.Time
		stalled      bool
	}{
		{"no lag, idle for long", 100, 100, 100, old, false},
		{"high watermark unknown", 100, 100, -1, old, false},
		{"lag, progress within the window", 100, 100, 200, recent, false},
		{"lag, no progress for longer than the window", 100, 100, 200, old, true},
		{"lag of one, no progress", 100, 100, 101, old, true},
		{"only transaction markers past the ledger", 100, 102, 102, old, false},
		{"records past the markers read", 100, 102, 103, old, true},
		{"just at the window", 100, 100, 200, now.Add(-window), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := readyFixture(window)
			p := k.addTestPartition("t.0", c.next, c.readTo, c.progressAt)
			if c.hwm >= 0 {
				k.hwm["t.0"] = c.hwm
			}
			got := k.findStalls(now)
			if (len(got) == 1) != c.stalled || len(got) > 1 {
				t.Fatalf("findStalls = %+v, want stalled %v", got, c.stalled)
			}
			if c.stalled {
				if got[0].log != "t.0" || got[0].lag != c.hwm-max(c.next, c.readTo) || !got[0].since.Equal(c.progressAt) {
					t.Errorf("stall %+v, want t.0 with lag %d since %v", got[0], c.hwm-max(c.next, c.readTo), c.progressAt)
				}
			}
			// Nothing to read resets the clock: records that arrive later
			// get a whole window.
			if c.hwm >= 0 && c.hwm <= max(c.next, c.readTo) && !p.progressAt.Equal(now) {
				t.Errorf("progressAt %v after a check with nothing to read, want %v", p.progressAt, now)
			}
		})
	}
}

// TestKafkaStallSkipsFailed: a partition stopped on an error is reported
// as stopped, not stalled (restarting the consumer would not help it).
func TestKafkaStallSkipsFailed(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	k := readyFixture(time.Second)
	k.addTestPartition("t.0", 10, 10, now.Add(-time.Hour))
	k.addTestPartition("t.1", 10, 10, now.Add(-time.Hour))
	k.hwm["t.0"], k.hwm["t.1"] = 20, 20
	k.failed["t.0"] = errors.New("bad log")
	if s := k.findStalls(now); len(s) != 1 || s[0].log != "t.1" {
		t.Fatalf("findStalls = %+v, want t.1 alone", s)
	}
}

// TestKafkaStallClockAfterIdle: records arriving at a partition idle for an
// hour are not a stall until the window has passed since they arrived.
func TestKafkaStallClockAfterIdle(t *testing.T) {
	const window = 10 * time.Second
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	k := readyFixture(window)
	k.addTestPartition("t.0", 50, 50, now.Add(-time.Hour))
	k.hwm["t.0"] = 50
	if s := k.findStalls(now); len(s) != 0 {
		t.Fatalf("caught up: %+v", s)
	}
	k.hwm["t.0"] = 80 // records arrive; the consumer does not move
	for _, d := range []time.Duration{time.Second, window} {
		if s := k.findStalls(now.Add(d)); len(s) != 0 {
			t.Fatalf("%v after records arrived: stalled %+v", d, s)
		}
	}
	s := k.findStalls(now.Add(window + time.Second))
	if len(s) != 1 || s[0].lag != 30 {
		t.Fatalf("past the window: %+v, want t.0 stalled with lag 30", s)
	}
}

// TestKafkaReadyRules: the order and wording of what Ready reports.
func TestKafkaReadyRules(t *testing.T) {
	k := readyFixture(30 * time.Second)
	if err := k.Ready(); err != nil {
		t.Fatalf("joined, nothing stalled: %v", err)
	}

	k.joined, k.outSince = false, time.Now().Add(-5*time.Second)
	if err := k.Ready(); err == nil || !strings.Contains(err.Error(), `not in consumer group "g"`) {
		t.Errorf("out of the group: Ready() = %v", err)
	}
	k.joined = true

	k.stalled = []stall{{log: "t.0", lag: 7, since: time.Now().Add(-time.Minute)}, {log: "t.3", lag: 1, since: time.Now().Add(-time.Minute)}}
	err := k.Ready()
	if err == nil || !strings.Contains(err.Error(), "t.0 (lag 7") || !strings.Contains(err.Error(), "t.3 (lag 1") {
		t.Errorf("stalled: Ready() = %v, want both partitions named with their lag", err)
	}

	// A stopped partition and a broker outage come first: they say more.
	k.failed["t.1"] = errors.New("bad log")
	if err := k.Ready(); err == nil || !strings.Contains(err.Error(), "partition t.1 stopped") {
		t.Errorf("failed partition: Ready() = %v", err)
	}
	k.status = errors.New("kafka: brokers unreachable")
	if err := k.Ready(); err == nil || err.Error() != "kafka: brokers unreachable" {
		t.Errorf("outage: Ready() = %v", err)
	}
}

// TestKafkaInstanceID: "none" and "" are dynamic membership, anything else
// is the static id.
func TestKafkaInstanceID(t *testing.T) {
	for in, want := range map[string]string{"": "", "none": "", "auditd-1": "auditd-1"} {
		c := KafkaConfig{InstanceID: in}
		if got := c.staticInstanceID(); got != want {
			t.Errorf("InstanceID %q: static id %q, want %q", in, got, want)
		}
	}
}

// TestKafkaUnconsumedRule: a partition no member of the group consumes is
// reported once it has gone so for longer than the metadata refresh plus the
// stall window, named with how long; stalled partitions are reported first.
func TestKafkaUnconsumedRule(t *testing.T) {
	k := readyFixture(10 * time.Second)
	k.cfg.MetadataRefresh = 5 * time.Second
	now := time.Now()
	k.unconsumed = map[string]time.Time{
		"t.2": now.Add(-10 * time.Second), // within 15s: the group may be rebalancing
		"t.4": now.Add(-16 * time.Second),
		"t.3": now.Add(-time.Minute),
	}
	err := k.Ready()
	if err == nil {
		t.Fatal("Ready() = nil with partitions unconsumed for longer than 15s")
	}
	msg := err.Error()
	for _, want := range []string{`group "g"`, "longer than 15s", "t.3 (for 1m0s), t.4 (for 16s)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready() = %v, want it to contain %q", err, want)
		}
	}
	if strings.Contains(msg, "t.2") {
		t.Errorf("Ready() = %v names t.2, unconsumed for 10s only", err)
	}
	k.stalled = []stall{{log: "t.0", lag: 7, since: now.Add(-time.Minute)}}
	if err := k.Ready(); err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Errorf("stalled and unconsumed: Ready() = %v, want the stall first", err)
	}
	k.stalled = nil
	k.unconsumed = map[string]time.Time{"t.2": now.Add(-10 * time.Second)}
	if err := k.Ready(); err != nil {
		t.Errorf("only t.2, within the bound: Ready() = %v", err)
	}
}

// TestKafkaConfigMetadataRefresh: the default, and the bounds the Kafka
// client takes.
func TestKafkaConfigMetadataRefresh(t *testing.T) {
	base := KafkaConfig{Brokers: []string{"b:9092"}, Topics: []string{"t"}}
	c := base
	c.setDefaults()
	if c.MetadataRefresh != 10*time.Second {
		t.Errorf("default metadata_refresh %v, want 10s", c.MetadataRefresh)
	}
	for d, ok := range map[time.Duration]bool{0: true, -time.Second: true, time.Millisecond: false, 10 * time.Millisecond: true, time.Hour: true, time.Hour + time.Second: false} {
		c := base
		c.MetadataRefresh = d
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("metadata_refresh %v: Validate() = %v, want ok %v", d, err, ok)
		}
	}
	c = base
	c.TopicRegex, c.Topics = true, []string{"pay(", "ok"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `"pay("`) {
		t.Errorf("bad pattern: Validate() = %v", err)
	}
}

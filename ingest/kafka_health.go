package ingest

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// stall is a partition with records to read and no progress.
type stall struct {
	log   string
	lag   int64
	since time.Time
}

// Ready returns nil when the brokers answer, the configured topics exist,
// the source is in its consumer group with an assignment (an empty one
// counts: another member has the partitions), every assigned partition
// has either nothing to read or made progress within the stall window, and
// every partition of the consumed topics is consumed by a member of the
// group, or has not gone without one for longer than unconsumedAfter.
func (k *Kafka) Ready() error {
	k.health.Lock()
	defer k.health.Unlock()
	if k.status != nil {
		return k.status
	}
	names := make([]string, 0, len(k.failed))
	for n := range k.failed {
		names = append(names, n)
	}
	if len(names) > 0 {
		sort.Strings(names)
		return fmt.Errorf("kafka: partition %s stopped: %w", names[0], k.failed[names[0]])
	}
	if !k.joined {
		return fmt.Errorf("kafka: not in consumer group %q (joining since %s)", k.cfg.Group, time.Since(k.outSince).Round(time.Second))
	}
	if len(k.stalled) > 0 {
		return stalledError(k.stalled, k.cfg.StallWindow)
	}
	if un := k.overdue(time.Now()); len(un) > 0 {
		var b strings.Builder
		for i, u := range un {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (for %s)", u.log, time.Since(u.since).Round(time.Second))
		}
		return fmt.Errorf("kafka: partitions not consumed by any member of group %q for longer than %s (metadata_refresh plus stall_window): %s",
			k.cfg.Group, k.unconsumedAfter(), b.String())
	}
	return nil
}

// unconsumedAfter is how long a partition of a consumed topic may go
// without a consumer: the group's leader sees a new partition within the
// metadata refresh, and the group then rebalances, which the stall window
// allows for.
func (k *Kafka) unconsumedAfter() time.Duration {
	return k.cfg.MetadataRefresh + k.cfg.StallWindow
}

// overdue returns the partitions unconsumed for longer than
// unconsumedAfter, by name, as stalls with no lag; k.health is held.
func (k *Kafka) overdue(now time.Time) []stall {
	var out []stall
	for name, since := range k.unconsumed {
		if now.Sub(since) > k.unconsumedAfter() {
			out = append(out, stall{log: name, since: since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].log < out[j].log })
	return out
}

func stalledError(ss []stall, window time.Duration) error {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (lag %d, no progress for %s)", s.log, s.lag, time.Since(s.since).Round(time.Second))
	}
	return fmt.Errorf("kafka: partitions stalled, records to read and no progress within %s: %s", window, b.String())
}

// fail stops consuming a partition until a restart and keeps the source
// not ready, with a clear log line.
func (k *Kafka) fail(log string, err error) {
	k.health.Lock()
	k.failed[log] = err
	k.health.Unlock()
	k.m.ready.Set(0)
	k.log.Error("kafka partition stopped until restart", "log", log, "err", err)
}

// setJoined records whether the consuming client is in its group.
func (k *Kafka) setJoined(in bool) {
	k.health.Lock()
	defer k.health.Unlock()
	if in == k.joined {
		return
	}
	k.joined = in
	if !in {
		k.outSince = time.Now()
		k.m.joined.Set(0)
		k.log.Info("kafka consumer out of its group", "group", k.cfg.Group)
		return
	}
	k.m.joined.Set(1)
	k.log.Info("kafka consumer in its group", "group", k.cfg.Group, "instance_id", k.cfg.staticInstanceID())
}

// watchHealth checks the brokers and the topics every few seconds and logs
// changes of state (not every failure, so an outage gives no log flood).
func (k *Kafka) watchHealth(ctx context.Context) {
	t := time.NewTicker(min(3*time.Second, max(k.cfg.StallWindow/2, 100*time.Millisecond)))
	defer t.Stop()
	for {
		topics, err := k.check(ctx)
		k.setStatus(err)
		if err == nil {
			k.refreshEnds(ctx)
			k.checkConsumed(ctx, topics, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchProgress finds stalled partitions and a consumer that stays out of
// its group, and restarts the consumer then: with backoff (the stall window,
// doubled at each restart that did not help, up to 5 minutes), and not
// while the brokers are unreachable (a new client would not help).
func (k *Kafka) watchProgress(ctx context.Context) {
	tick := min(time.Second, max(k.cfg.StallWindow/10, 50*time.Millisecond))
	t := time.NewTicker(tick)
	defer t.Stop()
	backoff := k.cfg.StallWindow
	var lastRestart time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		stalled := k.findStalls(now)
		k.health.Lock()
		k.stalled = stalled
		joined, outSince, brokersOK := k.joined, k.outSince, k.status == nil
		k.health.Unlock()
		k.m.stalled.Set(float64(len(stalled)))
		var why string
		switch {
		case len(stalled) > 0:
			why = stalledError(stalled, k.cfg.StallWindow).Error()
		case !joined && now.Sub(outSince) > max(k.cfg.StallWindow, k.cfg.SessionTimeout):
			// A join can legitimately wait for a dead member's session to
			// time out; past that, the group is not letting this member in.
			why = fmt.Sprintf("not in consumer group %q for %s", k.cfg.Group, now.Sub(outSince).Round(time.Second))
		default:
			if joined && now.Sub(lastRestart) > 2*backoff {
				backoff = k.cfg.StallWindow
			}
			continue
		}
		if !brokersOK || now.Sub(lastRestart) < backoff {
			continue
		}
		if !lastRestart.IsZero() {
			backoff = min(2*backoff, 5*time.Minute)
		}
		lastRestart = now
		k.log.Error("kafka source stalled: restarting the consumer", "why", why)
		select {
		case k.restart <- why:
		default:
		}
	}
}

// findStalls returns the assigned partitions that have records to read
// (their high watermark is past what the source has read) and have made no
// progress for the stall window. The window starts at the partition's
// latest progress or the latest moment it had nothing to read. Partitions
// stopped on an error (Kafka.fail) are reported as such, not as stalled: a
// new consumer would not help them.
func (k *Kafka) findStalls(now time.Time) []stall {
	k.health.Lock()
	failed := make(map[string]bool, len(k.failed))
	for n := range k.failed {
		failed[n] = true
	}
	k.health.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []stall
	for name, p := range k.parts {
		if failed[name] {
			continue
		}
		hwm, ok := k.hwm[name]
		p.mu.Lock()
		read := max(p.pos.Next, p.readTo)
		if !ok || hwm <= read {
			p.progressAt = now
		}
		since := p.progressAt
		p.mu.Unlock()
		if ok && hwm > read && now.Sub(since) > k.cfg.StallWindow {
			out = append(out, stall{log: name, lag: hwm - read, since: since})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].log < out[j].log })
	return out
}

// refreshEnds reads the end offsets of the assigned partitions, so lag is
// known even when a partition has nothing new to fetch (after a restart at
// its end) or its fetches stall.
func (k *Kafka) refreshEnds(ctx context.Context) {
	k.mu.Lock()
	var topics []string
	seen := map[string]bool{}
	for _, p := range k.parts {
		if !seen[p.topic] {
			seen[p.topic] = true
			topics = append(topics, p.topic)
		}
	}
	k.mu.Unlock()
	if len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		name := LogName(o.Topic, o.Partition)
		k.mu.Lock()
		p := k.parts[name]
		if p != nil && o.Offset > k.hwm[name] {
			k.hwm[name] = o.Offset
		}
		k.mu.Unlock()
		if p != nil {
			p.updateLag(o.Offset)
		}
	})
}

// check checks that the brokers answer and the configured topics exist,
// and returns the brokers' metadata of the topics consumed: the configured
// ones, or with TopicRegex every topic (internal ones aside) matching a
// pattern, as the client matches them.
func (k *Kafka) check(ctx context.Context) (kadm.TopicDetails, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := k.admCl.Ping(ctx); err != nil {
		if k.cfg.SASL != nil || k.cfg.TLS != nil {
			// Brokers that refuse a login or a handshake often just close
			// the connection: say what to check.
			return nil, fmt.Errorf("kafka: brokers %v unreachable or refused the connection (check the TLS settings and SASL credentials): %w", k.cfg.Brokers, err)
		}
		return nil, fmt.Errorf("kafka: brokers %v unreachable: %w", k.cfg.Brokers, err)
	}
	if k.cfg.TopicRegex {
		td, err := k.adm.ListTopics(ctx)
		if err != nil {
			return nil, fmt.Errorf("kafka: list topics: %w", err)
		}
		for t := range td {
			if !slices.ContainsFunc(k.patterns, func(re *regexp.Regexp) bool { return re.MatchString(t) }) {
				delete(td, t)
			}
		}
		return td, nil
	}
	td, err := k.adm.ListTopics(ctx, k.cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	for _, t := range k.cfg.Topics {
		d, ok := td[t]
		if !ok {
			return nil, fmt.Errorf("kafka: topic %q does not exist", t)
		}
		if d.Err != nil {
			return nil, fmt.Errorf("kafka: topic %q: %w", t, d.Err)
		}
	}
	return td, nil
}

// checkConsumed finds the partitions of the consumed topics (topics, the
// brokers' metadata) that no member of the group consumes: not running
// here, not stopped here on an error (Ready reports those), and not
// assigned to another member. A partition added to a topic is one until the
// group's leader re-reads the metadata and the group rebalances; Ready
// reports those that stay unconsumed for longer than unconsumedAfter. If
// the group cannot be described, the previous finding stands.
func (k *Kafka) checkConsumed(ctx context.Context, topics kadm.TopicDetails, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	groups, err := k.adm.DescribeGroups(ctx, k.cfg.Group)
	if err != nil {
		return
	}
	g, ok := groups[k.cfg.Group]
	if !ok || g.Err != nil {
		return
	}
	// This member's assignment is what runs here (k.parts): what the
	// group says it gave this member may not have started yet.
	me, _ := k.client().GroupMetadata()
	elsewhere := map[string]bool{}
	for _, m := range g.Members {
		c, ok := m.Assigned.AsConsumer()
		if m.MemberID == me || !ok {
			continue
		}
		for _, t := range c.Topics {
			for _, p := range t.Partitions {
				elsewhere[LogName(t.Topic, p)] = true
			}
		}
	}
	k.mu.Lock()
	here := make(map[string]bool, len(k.parts))
	for name := range k.parts {
		here[name] = true
	}
	k.mu.Unlock()

	k.health.Lock()
	defer k.health.Unlock()
	prev := k.unconsumed
	k.unconsumed = map[string]time.Time{}
	for _, t := range topics {
		if t.Err != nil {
			continue
		}
		for p := range t.Partitions {
			name := LogName(t.Topic, p)
			if _, failed := k.failed[name]; here[name] || elsewhere[name] || failed {
				continue
			}
			since, ok := prev[name]
			if !ok {
				since = now
			}
			k.unconsumed[name] = since
		}
	}
	un := k.overdue(now)
	k.m.unconsumed.Set(float64(len(un)))
	for _, u := range un {
		if prev[u.log].Add(k.unconsumedAfter()).Before(k.checkedAt) {
			continue // logged at an earlier check
		}
		k.log.Error("kafka partition not consumed by any member of the group", "log", u.log, "group", k.cfg.Group, "since", u.since,
			"hint", "the group's leader rebalances when its metadata refresh finds a new partition; see docs/kafka.md")
	}
	k.checkedAt = now
}

func (k *Kafka) setStatus(err error) {
	k.health.Lock()
	prev := k.status
	k.status = err
	k.health.Unlock()
	switch {
	case err == nil && prev != nil:
		k.m.ready.Set(1)
		k.log.Info("kafka brokers answer and the topics exist", "brokers", k.cfg.Brokers, "topics", k.cfg.Topics)
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		k.m.ready.Set(0)
		k.log.Error("kafka source not ready: brokers or topics", "err", err)
	}
}

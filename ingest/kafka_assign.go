package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ledger"
)

// recreated handles a topic that was deleted and maybe recreated: it
// purges the topic from the client and subscribes to it again. The
// partitions this instance held are then read from their first offset, so
// that a record written again at an offset a log holds is compared with the
// leaf there (a conflict if it differs).
func (k *Kafka) recreated(cl *kgo.Client, topic string, parts []int32) {
	k.log.Warn("kafka topic deleted or recreated: consuming it again from its first offset", "topic", topic, "partitions", parts)
	k.setStatus(fmt.Errorf("kafka: topic %q was deleted or recreated", topic))
	k.mu.Lock()
	var next []int64
	for _, p := range parts {
		k.reread[LogName(topic, p)] = true
		n := int64(-1)
		if pt := k.parts[LogName(topic, p)]; pt != nil {
			pt.mu.Lock()
			n = pt.pos.Next
			pt.mu.Unlock()
		}
		next = append(next, n)
	}
	k.mu.Unlock()
	for i, p := range parts {
		k.topicViolation(LogName(topic, p), next[i], fmt.Sprintf("topic %q was deleted or recreated while being consumed: the partition is read again from its first offset "+
			"and each offset compared with the leaf the log holds (an offset_conflict for each record that differs)", topic))
	}
	cl.PurgeTopicsFromClient(topic)
	if !k.cfg.TopicRegex {
		cl.AddConsumeTopics(topic)
	}
}

// assigned is called at the end of each join of the group, with what it
// added to the assignment (maybe nothing).
func (k *Kafka) assigned(context.Context, *kgo.Client, map[string][]int32) {
	k.setJoined(true)
}

// adjustOffsets starts each assigned partition at its ledger's position,
// not at the group's committed offset: the ledger is the record of what was
// consumed. A partition without a ledger log starts at its first offset.
func (k *Kafka) adjustOffsets(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	topics := make([]string, 0, len(assigned))
	for topic := range assigned {
		topics = append(topics, topic)
	}
	ids, err := k.topicIDs(ctx, topics)
	if err != nil {
		// Not known now: the partitions resume from their positions, and
		// the next assignment (or the kafka_reread check) compares them.
		k.log.Warn("kafka: topic ids not read; not compared at this assignment", "err", err)
	}
	for topic, ps := range assigned {
		for part := range ps {
			p, err := k.assign(topic, part, ids[topic])
			if err != nil {
				// Only this partition stops: its records are fetched and
				// dropped (nothing is committed for it), the others go on.
				k.fail(LogName(topic, part), err)
				ps[part] = kgo.NewOffset().AtEnd()
				continue
			}
			k.mu.Lock()
			reread := k.reread[p.name]
			k.mu.Unlock()
			p.mu.Lock()
			next := p.pos.Next
			p.mu.Unlock()
			if next > 0 && !reread {
				ps[part] = kgo.NewOffset().At(next).WithEpoch(-1)
			} else {
				ps[part] = kgo.NewOffset().AtStart()
			}
			k.log.Info("kafka partition assigned", "log", p.name, "from_offset", next, "reread", reread)
		}
	}
	return assigned, nil
}

// assign returns the partition of topic/part, set up and running: the one
// in hand, or a new one over its log. topicID is the brokers' current id of
// the topic ("" if unknown), compared with the one the log recorded
// (checkTopicID); a partition that fails the comparison is not consumed.
func (k *Kafka) assign(topic string, part int32, topicID string) (*partition, error) {
	p, fresh, err := k.partition(topic, part)
	if err != nil {
		return nil, err
	}
	if err := k.checkTopicID(p, topicID); err != nil {
		k.mu.Lock()
		delete(k.parts, p.name)
		k.mu.Unlock()
		if !fresh {
			p.stop()
		}
		return nil, err
	}
	if fresh {
		go p.run()
	}
	return p, nil
}

// partition returns the partition in hand, or a new one not yet running
// (fresh).
func (k *Kafka) partition(topic string, part int32) (p *partition, fresh bool, err error) {
	name := LogName(topic, part)
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.parts[name]; p != nil {
		return p, false, nil
	}
	if !ledger.ValidLogName(name) {
		return nil, false, fmt.Errorf("topic %q makes the invalid log name %q", topic, name)
	}
	l, err := k.store.CreateLog(name)
	if err != nil {
		return nil, false, err
	}
	pos := &Position{Topic: topic, Partition: part}
	if l.SourcePosition() == nil && l.Size() > 0 {
		return nil, false, fmt.Errorf("log %s holds %d entries that did not come from this partition", name, l.Size())
	}
	if b := l.SourcePosition(); b != nil {
		if pos, err = DecodePosition(b); err != nil {
			return nil, false, fmt.Errorf("log %s: %w", name, err)
		}
		if pos.Topic != topic || pos.Partition != part {
			return nil, false, fmt.Errorf("log %s records source %s/%d, not %s/%d", name, pos.Topic, pos.Partition, topic, part)
		}
	}
	p = &partition{k: k, name: name, topic: topic, log: l, pos: *pos, topicID: pos.TopicID, in: make(chan batch, partitionQueue), done: make(chan struct{}), progressAt: time.Now()}
	p.consumed = k.m.consumed.WithLabelValues(name)
	p.bytes = k.m.bytes.WithLabelValues(name)
	p.gaps = k.m.gaps.WithLabelValues(name)
	p.conflicts = k.m.conflicts.WithLabelValues(name)
	p.redelivered = k.m.redelivered.WithLabelValues(name)
	k.parts[name] = p
	return p, true, nil
}

// revoked finishes the revoked partitions' batches in hand, then commits
// the group offsets, so the next owner's lag tools start from the truth.
func (k *Kafka) revoked(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	k.release(lost)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		k.log.Warn("kafka: group offsets not committed on revoke", "err", err)
	}
}

// lost is called when the group session ended (an error, a fenced member):
// the member is out of its group until it joins again.
func (k *Kafka) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	k.setJoined(false)
	k.release(lost)
}

func (k *Kafka) release(ps map[string][]int32) {
	for topic, parts := range ps {
		for _, part := range parts {
			name := LogName(topic, part)
			k.mu.Lock()
			p := k.parts[name]
			delete(k.parts, name)
			k.mu.Unlock()
			if p != nil {
				p.stop()
				k.log.Info("kafka partition released", "log", name, "next_offset", p.pos.Next)
			}
		}
	}
}

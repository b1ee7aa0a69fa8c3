package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/auditd/auditd/ledger"
)

// Topic ids: Kafka gives each topic a UUID when it is created, so a topic
// deleted and recreated under the same name has a new one, and its
// partitions restart at offset 0 with whatever records the producers write
// again. A partition's position records the id (Position.TopicID); the
// source compares it with the broker's at each assignment.

// topicIDs returns the brokers' current topic id of each topic, "" where
// the broker has none (before Kafka 2.8) or did not say.
func (k *Kafka) topicIDs(ctx context.Context, topics []string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	md, err := k.adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: topic ids: %w", err)
	}
	out := make(map[string]string, len(topics))
	for _, t := range topics {
		if d, ok := md.Topics[t]; ok && d.Err == nil {
			out[t] = TopicIDString(d.ID)
		}
	}
	return out, nil
}

// TopicRecreatedError reports a partition whose topic id differs from the
// one its log recorded: the topic was deleted and recreated while the
// source was not consuming it.
type TopicRecreatedError struct {
	Log, Topic string
	Recorded   string // the id the log's position holds
	Current    string // the brokers' id now
	NextOffset int64
	LogEntries uint64
}

func (e *TopicRecreatedError) Error() string {
	return fmt.Sprintf("topic %q was deleted and recreated while this log was not consuming it: the log recorded topic id %s, the brokers have %s; "+
		"the partition is stopped (the log holds %d entries, next offset %d): compare it with the kafka_reread_full check, then restart with kafka.resume_recreated to read the new topic from its first offset",
		e.Topic, e.Recorded, e.Current, e.LogEntries, e.NextOffset)
}

// checkTopicID compares the topic id p's log recorded with the brokers'
// current one (current; "" when unknown) when p is assigned. A log without
// one records it. A changed id is an integrity violation: the topic was
// deleted and recreated while the partition was not consumed. Unless the
// source saw it happen (it then re-reads the partition, see recreated) or
// KafkaConfig.ResumeRecreated is set, the partition stops with an
// *TopicRecreatedError; otherwise it is read again from its first offset and
// records the new id.
func (k *Kafka) checkTopicID(p *partition, current string) error {
	p.mu.Lock()
	recorded, had, next := p.pos.TopicID, p.topicID, p.pos.Next
	p.mu.Unlock()
	if current == "" || current == had {
		return nil
	}
	if recorded == "" && had == "" {
		p.setTopicID(current) // written with the partition's next position
		return nil
	}
	k.mu.Lock()
	seen := k.reread[p.name]
	k.mu.Unlock()
	if !seen {
		e := &TopicRecreatedError{Log: p.name, Topic: p.topic, Recorded: had, Current: current, NextOffset: next, LogEntries: p.log.Size()}
		k.topicViolation(p.name, next, e.Error())
		if !k.cfg.ResumeRecreated {
			return e
		}
		k.mu.Lock()
		k.reread[p.name] = true
		k.mu.Unlock()
		k.log.Warn("kafka topic recreated: resume_recreated is set, reading it again from its first offset", "log", p.name, "recorded_topic_id", had, "topic_id", current)
	}
	p.setTopicID(current)
	return nil
}

// topicViolation raises a source_recreated violation for log.
func (k *Kafka) topicViolation(log string, next int64, detail string) {
	k.m.recreated.WithLabelValues(log).Inc()
	k.log.Error("integrity violation: kafka topic deleted and recreated", "log", log, "detail", detail)
	if f := k.onViolation; f != nil {
		f(Violation{Log: log, Kind: ledger.IntegritySourceRecreated, Offset: next, Detail: detail})
	}
}

// setTopicID sets the topic id the partition's next position records.
func (p *partition) setTopicID(id string) {
	p.mu.Lock()
	p.topicID = id
	p.mu.Unlock()
}

// recordTopicID writes the partition's position at once when its topic id
// is not the one recorded, so a partition with nothing new to read still
// keeps the id of the topic it was read from.
func (p *partition) recordTopicID() error {
	p.mu.Lock()
	stale := p.topicID != "" && p.topicID != p.pos.TopicID
	p.mu.Unlock()
	if !stale {
		return nil
	}
	return p.append(nil, nil)
}

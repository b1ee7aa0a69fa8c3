package ingest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Position is a Kafka partition's consumed position as its ledger log
// records it: written in the same Pebble batch as the entries appended from
// the partition (ledger.Log.AppendSource), so after a crash the source
// resumes exactly after the last durable entry.
type Position struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// TopicID is the topic's id (a UUID, in Kafka's base64 form) when the
	// partition was assigned: a topic deleted and recreated under the same
	// name has a new one. Empty in positions written before it was recorded
	// (and for brokers without topic ids, before Kafka 2.8).
	TopicID string `json:"topic_id,omitempty"`
	// Next is the next offset to read: every offset below it is either a
	// leaf of the log or inside a recorded gap.
	Next int64 `json:"next"`
	// GapOffsets counts the offsets skipped in all gaps; Gaps lists the
	// latest gaps (at most MaxRecorded).
	GapOffsets int64 `json:"gap_offsets"`
	GapCount   int64 `json:"gap_count"`
	Gaps       []Gap `json:"gaps,omitempty"`
	// Conflicts counts records re-read at an offset the log already holds
	// whose content differs from the leaf (a rewritten partition, an
	// unclean leader election); the original leaf is kept. Conflicted lists
	// the latest of them.
	Conflicts  int64      `json:"conflicts"`
	Conflicted []Conflict `json:"conflicted,omitempty"`
}

// MaxRecorded bounds the gaps and conflicts a Position lists.
const MaxRecorded = 100

// Gap is a range of offsets [From, To] that the partition skipped: compacted
// away, transaction markers, or deleted by retention before they were read.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Conflict is a record whose content differs from the leaf the log holds for
// its offset.
type Conflict struct {
	Offset int64 `json:"offset"`
	// Index is the log index of the original leaf.
	Index uint64 `json:"index"`
	// LeafHash is the hash the re-read record would have had.
	LeafHash string `json:"leaf_hash"`
}

// DecodePosition decodes a position written by the Kafka source.
func DecodePosition(b []byte) (*Position, error) {
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("ingest: bad source position: %w", err)
	}
	return &p, nil
}

func (p *Position) encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a Position always encodes
	}
	return b
}

func (p *Position) addGap(from, to int64) {
	p.GapOffsets += to - from + 1
	p.GapCount++
	p.Gaps = append(p.Gaps, Gap{From: from, To: to})
	if len(p.Gaps) > MaxRecorded {
		p.Gaps = append([]Gap(nil), p.Gaps[len(p.Gaps)-MaxRecorded:]...)
	}
}

func (p *Position) addConflict(c Conflict) {
	p.Conflicts++
	p.Conflicted = append(p.Conflicted, c)
	if len(p.Conflicted) > MaxRecorded {
		p.Conflicted = append([]Conflict(nil), p.Conflicted[len(p.Conflicted)-MaxRecorded:]...)
	}
}

func (p *Position) clone() Position {
	c := *p
	c.Gaps = append([]Gap(nil), p.Gaps...)
	c.Conflicted = append([]Conflict(nil), p.Conflicted...)
	return c
}

// TopicIDString is a topic id as Position.TopicID holds it: Kafka's own
// form (URL-safe base64 without padding, as kafka-topics.sh prints it), ""
// for the zero id of a broker without topic ids.
func TopicIDString(id [16]byte) string {
	if id == ([16]byte{}) {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

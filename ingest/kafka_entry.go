package ingest

import (
	"crypto/sha256"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// entry turns a record into a ledger entry: a pure function of the record,
// so two instances consuming one partition build identical leaves.
func (k *Kafka) entry(r *kgo.Record) ledger.Entry {
	b := entryBuilder{cfg: &k.cfg, log: LogName(r.Topic, r.Partition)}
	return b.entry(r)
}

// RecordLeaf returns the leaf hash the Kafka source configured by cfg gives
// record r in its partition's log, for comparing a record read again from
// the broker with the leaf the log holds at its offset. held is that leaf
// (nil if none): a record first ledgered under a fallback id, its id header
// taken by an earlier record (merkle.MarkDuplicateID), keeps the id chosen
// then, which depends on the records before it; the rest of the leaf is
// recomputed from r.
func RecordLeaf(cfg KafkaConfig, r *kgo.Record, held *merkle.Leaf) merkle.Hash {
	cfg.setDefaults()
	log := LogName(r.Topic, r.Partition)
	b := entryBuilder{cfg: &cfg, log: log}
	e := b.entry(r)
	if held != nil && held.Marks&merkle.MarkDuplicateID != 0 {
		e.ID = held.ID
		e.Marks |= merkle.MarkDuplicateID
	}
	return leafOf(log, &e)
}

// entryBuilder builds the entries of one partition's records under cfg
// (defaults set). It hands out the entries' sources and headers from
// slabs, one allocation per batch of records rather than per record.
type entryBuilder struct {
	cfg  *KafkaConfig
	log  string // LogName of the records' partition
	srcs []merkle.Source
	hdrs []merkle.Header
}

// entries builds the entries of recs, records of b's partition.
func (b *entryBuilder) entries(recs []*kgo.Record) []ledger.Entry {
	nh := 0
	for _, r := range recs {
		nh += len(r.Headers)
	}
	b.srcs, b.hdrs = make([]merkle.Source, len(recs)), make([]merkle.Header, 0, nh)
	out := make([]ledger.Entry, len(recs))
	for i, r := range recs {
		out[i] = b.entry(r)
	}
	return out
}

// entry is the entry the source builds from r.
func (b *entryBuilder) entry(r *kgo.Record) ledger.Entry {
	var src *merkle.Source
	if len(b.srcs) > 0 {
		src, b.srcs = &b.srcs[0], b.srcs[1:]
	} else {
		src = new(merkle.Source)
	}
	*src = merkle.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	e := ledger.Entry{Source: src, Time: r.Timestamp, HasKey: r.Key != nil, Key: r.Key}
	if len(e.Key) > merkle.MaxKey {
		h := sha256.Sum256(e.Key)
		e.Key = h[:]
		e.Marks |= merkle.MarkKeyOversize
	}
	if e.Time.IsZero() {
		e.Time = time.Unix(0, 0).UTC()
	}
	if len(r.Headers) > 0 {
		// A full-capacity slice of the slab: appending to it (Fit does
		// not) could not write over the next entry's headers.
		n := len(b.hdrs)
		for _, h := range r.Headers {
			if h.Key == b.cfg.IDHeader && e.ID == "" && len(h.Value) > 0 && len(h.Value) <= merkle.MaxID && utf8.Valid(h.Value) {
				e.ID = string(h.Value)
			}
			b.hdrs = append(b.hdrs, merkle.Header{Key: h.Key, Value: h.Value})
		}
		e.Headers = b.hdrs[n:len(b.hdrs):len(b.hdrs)]
	}
	if e.ID == "" {
		e.ID = positionID(src)
	}
	fitLeaf(b.log, &e)
	v := r.Value
	switch {
	case len(v) > b.cfg.MaxRecordBytes:
		h := merkle.Hash(sha256.Sum256(v))
		e.PayloadHash = &h
		e.Marks |= merkle.MarkOversize
	case len(v) == 0:
		e.Payload = []byte{}
		e.Marks |= merkle.MarkEmpty | merkle.MarkNotJSON
	default:
		e.Payload = v
		isJSON, isUTF8 := payloadKind(v)
		if !isUTF8 {
			e.Marks |= merkle.MarkNotUTF8
		}
		if isJSON {
			e.PayloadJSON = true
		} else {
			e.Marks |= merkle.MarkNotJSON
		}
	}
	return e
}

// fitLeaf hashes the header values, then the key, of an entry whose leaf
// could exceed merkle.MaxLeafSize (merkle.Leaf.Fit), so that every record
// can be served in an entry bundle.
func fitLeaf(log string, e *ledger.Entry) {
	l := merkle.Leaf{Log: log, ID: e.ID, HasKey: e.HasKey, Key: e.Key, Source: e.Source, Headers: e.Headers, Marks: e.Marks}
	l.Fit()
	e.Key, e.Headers, e.Marks = l.Key, l.Headers, l.Marks
}

// maxFallbackIDs bounds the numbered ids fallbackID tries for one record.
const maxFallbackIDs = 16

// fallbackID returns the next id to try for e, whose id is taken: its
// position id, then the position id numbered "#1", "#2"..., skipping the id
// it has now. *n counts the ids tried.
func fallbackID(e *ledger.Entry, n *int) (string, bool) {
	for *n <= maxFallbackIDs {
		id := positionID(e.Source)
		if *n > 0 {
			id += "#" + strconv.Itoa(*n)
		}
		*n++
		if id != e.ID {
			return id, true
		}
	}
	return "", false
}

// positionID is the id of a record whose producer gave none.
func positionID(s *merkle.Source) string {
	return s.Topic + "/" + strconv.Itoa(int(s.Partition)) + "/" + strconv.FormatInt(s.Offset, 10)
}

// leafOf computes the leaf hash the ledger gives e in log.
func leafOf(log string, e *ledger.Entry) merkle.Hash {
	l := merkle.Leaf{Log: log, ID: e.ID, HasKey: e.HasKey, Key: e.Key, Time: e.Time.UnixNano(), Source: e.Source, Headers: e.Headers, Marks: e.Marks}
	if e.PayloadHash != nil {
		l.PayloadSHA256 = *e.PayloadHash
	} else {
		l.PayloadSHA256 = sha256.Sum256(e.Payload)
	}
	h, err := l.Hash()
	if err != nil {
		return merkle.Hash{}
	}
	return h
}

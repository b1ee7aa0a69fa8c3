package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/auditd/auditd/merkle"
)

// Entry is an event as a producer hands it to the ledger.
type Entry struct {
	// ID is the idempotency key. If empty, Append derives one from the
	// content: see DeriveID.
	ID string
	// HasKey distinguishes an empty key from no key.
	HasKey bool
	Key    []byte
	// Time is the event time. If zero, Append stamps the arrival time and
	// marks it as assigned; an assigned time is not part of the content that
	// idempotency compares.
	Time time.Time
	// Source is the position in the source log (Kafka), if any.
	Source *merkle.Source
	// Payload holds the event's bytes. PayloadJSON records that they are a
	// JSON value, so readers can render them as JSON; it is not committed to.
	Payload     []byte
	PayloadJSON bool
	// PayloadHash, if set, is the SHA-256 of a payload that is not stored
	// (an oversize record): the leaf commits to it and Payload must be nil.
	PayloadHash *merkle.Hash
	// Headers are the source record's headers; Marks are merkle.Mark* bits.
	// Both are committed to by the leaf.
	Headers []merkle.Header
	Marks   uint8
}

// Record is an entry as the ledger holds it.
type Record struct {
	Index       uint64
	Leaf        merkle.Leaf
	LeafBytes   []byte
	LeafHash    merkle.Hash
	Payload     []byte
	PayloadJSON bool
	// PayloadPruned says the payload was removed after retention; the leaf
	// still commits to its hash.
	PayloadPruned bool
}

// DeriveID returns the id auditd gives an entry whose producer set none: the
// first 32 hex digits of SHA-256 over the content a producer controls (key,
// time if given, source position, payload hash). A retry of the same event
// gets the same id; different events get different ids.
func DeriveID(e *Entry) string {
	h := sha256.New()
	var b []byte
	if e.HasKey {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Key)))
		b = append(b, e.Key...)
	} else {
		b = append(b, 0)
	}
	if !e.Time.IsZero() {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixNano()))
	} else {
		b = append(b, 0)
	}
	if s := e.Source; s != nil {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.Topic)))
		b = append(b, s.Topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(s.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(s.Offset))
	} else {
		b = append(b, 0)
	}
	ph := sha256.Sum256(e.Payload)
	b = append(b, ph[:]...)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// sameContent reports whether two leaves carry the same producer content:
// everything but a time auditd assigned on arrival.
func sameContent(a, b *merkle.Leaf) bool {
	if a.ID != b.ID || a.HasKey != b.HasKey || !bytes.Equal(a.Key, b.Key) ||
		a.TimeAssigned != b.TimeAssigned || a.PayloadSHA256 != b.PayloadSHA256 {
		return false
	}
	if !a.TimeAssigned && a.Time != b.Time {
		return false
	}
	if (a.Source == nil) != (b.Source == nil) || a.Marks != b.Marks || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return a.Source == nil || *a.Source == *b.Source
}

// Stored entry encoding (the value of an entry key). The log name is implied
// by the key and the payload hash by the payload, so neither is stored:
//
//	flags u8 (bit 0 key, 1 time assigned, 2 source, 3 payload is JSON, 4 payload pruned,
//	          7 packed id)
//	uvarint len, id; or with bit 7 the packed id (packid.go: uvarint header, bytes)
//	[uvarint len, key]
//	time i64 big-endian Unix nanoseconds
//	[uvarint len, topic; uvarint partition; uvarint offset]
//	[uvarint count, then per header uvarint len, name, uvarint len, value]  (bit 5)
//	[marks u8]                                                            (bit 6)
//	payload bytes to the end, or the 32-byte payload hash if pruned
const (
	sKey          = 1 << 0
	sTimeAssigned = 1 << 1
	sSource       = 1 << 2
	sPayloadJSON  = 1 << 3
	sPruned       = 1 << 4
	sHeaders      = 1 << 5
	sMarks        = 1 << 6
	sPackedID     = 1 << 7 // storage layout 2; layout 1 entries never set it
	sKnown        = sKey | sTimeAssigned | sSource | sPayloadJSON | sPruned | sHeaders | sMarks | sPackedID
)

// appendStored appends the stored form of an entry; a nil payload with
// omitted set stores only the leaf's payload hash.
func appendStored(b []byte, l *merkle.Leaf, payload []byte, payloadJSON, omitted bool) []byte {
	var f byte
	if l.HasKey {
		f |= sKey
	}
	if l.TimeAssigned {
		f |= sTimeAssigned
	}
	if l.Source != nil {
		f |= sSource
	}
	if payloadJSON {
		f |= sPayloadJSON
	}
	if omitted {
		f |= sPruned
	}
	if len(l.Headers) > 0 {
		f |= sHeaders
	}
	if l.Marks != 0 {
		f |= sMarks
	}
	form, n, packed := packForm(l.ID)
	if packed {
		f |= sPackedID
	}
	b = append(b, f)
	if packed {
		b = appendPackedID(b, l.ID, form, n)
	} else {
		b = binary.AppendUvarint(b, uint64(len(l.ID)))
		b = append(b, l.ID...)
	}
	if l.HasKey {
		b = binary.AppendUvarint(b, uint64(len(l.Key)))
		b = append(b, l.Key...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(l.Time))
	if s := l.Source; s != nil {
		b = binary.AppendUvarint(b, uint64(len(s.Topic)))
		b = append(b, s.Topic...)
		b = binary.AppendUvarint(b, uint64(uint32(s.Partition)))
		b = binary.AppendUvarint(b, uint64(s.Offset))
	}
	if len(l.Headers) > 0 {
		b = binary.AppendUvarint(b, uint64(len(l.Headers)))
		for _, h := range l.Headers {
			b = binary.AppendUvarint(b, uint64(len(h.Key)))
			b = append(b, h.Key...)
			b = binary.AppendUvarint(b, uint64(len(h.Value)))
			b = append(b, h.Value...)
		}
	}
	if l.Marks != 0 {
		b = append(b, l.Marks)
	}
	if omitted {
		return append(b, l.PayloadSHA256[:]...)
	}
	return append(b, payload...)
}

var errStored = errors.New("ledger: corrupt stored entry")

// decodeStored decodes a stored entry of the named log. The returned record
// does not alias b.
func decodeStored(log string, index uint64, b []byte) (*Record, error) {
	return decodeStoredAs(log, index, b, true, nil)
}

// decodeStoredAs decodes a stored entry; without leaf it leaves the payload
// hash, leaf bytes and leaf hash unset (ScanEntries takes the leaf hash from
// the tiles). The record, its payload and key come from a (allocated one
// by one if a is nil).
func decodeStoredAs(log string, index uint64, b []byte, leaf bool, a *recordSlab) (*Record, error) {
	var e storedEntry
	// A packed id's text goes to a's reusable buffer: a stack array here
	// would move to the heap (decode keeps a slice of it in e), one
	// allocation per entry read.
	idBuf, err := e.decode(b, a.idScratch())
	if err != nil {
		return nil, err
	}
	a.keepIDScratch(idBuf)
	r := a.record()
	r.Index = index
	l := &r.Leaf
	l.Log = log
	l.ID = string(e.id) // its own allocation: folds keep ids (a key's last event) long after the scan
	if e.flags&sKey != 0 {
		l.HasKey, l.Key = true, a.bytes(e.key)
	}
	l.Time, l.TimeAssigned, l.Marks = e.time, e.flags&sTimeAssigned != 0, e.marks
	if e.flags&sSource != 0 {
		l.Source = &merkle.Source{Topic: string(e.topic), Partition: e.partition, Offset: e.offset}
	}
	if e.nHeaders > 0 {
		l.Headers = make([]merkle.Header, 0, e.nHeaders)
		e.eachHeader(func(k, v []byte) {
			l.Headers = append(l.Headers, merkle.Header{Key: string(k), Value: append([]byte{}, v...)})
		})
	}
	r.PayloadJSON = e.flags&sPayloadJSON != 0
	if e.flags&sPruned != 0 {
		r.PayloadPruned = true
		copy(l.PayloadSHA256[:], e.payload)
	} else {
		r.Payload = a.bytes(e.payload)
		if !leaf {
			return r, nil
		}
		l.PayloadSHA256 = sha256.Sum256(r.Payload)
	}
	if !leaf {
		return r, nil
	}
	lb, err := l.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("ledger: entry %d of %s: %w", index, log, err)
	}
	r.LeafBytes = lb
	r.LeafHash = merkle.LeafHash(lb)
	return r, nil
}

// storedEntry is a stored entry value decoded in place: the one decoder of
// the encoding above. Its byte fields alias the value (a packed id's text,
// the buffer decode was given); reads copy them into a Record
// (decodeStoredAs), the scan hashes them where they are (scratch.leafHash).
type storedEntry struct {
	flags     byte
	id        []byte
	key       []byte // with sKey
	time      int64
	topic     []byte // with sSource
	partition int32
	offset    int64
	nHeaders  int
	headers   []byte // with sHeaders: the encoded name and value pairs, checked
	marks     byte
	payload   []byte // the payload, or with sPruned its SHA-256
}

// decode decodes the stored value b into e. A packed id's text is written
// into idBuf, which is returned for reuse. It checks the whole encoding: a
// value decode accepts has every field in bounds and, if pruned, a payload
// hash of 32 bytes.
func (e *storedEntry) decode(b, idBuf []byte) ([]byte, error) {
	*e = storedEntry{}
	if len(b) < 1 {
		return idBuf, errStored
	}
	e.flags = b[0]
	if e.flags&^sKnown != 0 {
		return idBuf, fmt.Errorf("%w: unknown flag bits %#x", errStored, e.flags&^sKnown)
	}
	sr := storedReader{b: b[1:]}
	ok := true
	if e.flags&sPackedID != 0 {
		var id, rest []byte
		if id, rest, ok = unpackID(idBuf[:0], sr.b); ok {
			idBuf, e.id, sr.b = id, id, rest
		}
	} else {
		e.id, ok = sr.str()
	}
	if ok && e.flags&sKey != 0 {
		if e.key, ok = sr.str(); ok && e.key == nil {
			e.key = []byte{}
		}
	}
	if !ok || len(sr.b) < 8 {
		return idBuf, errStored
	}
	e.time = int64(binary.BigEndian.Uint64(sr.b))
	sr.b = sr.b[8:]
	if e.flags&sSource != 0 {
		t, ok1 := sr.str()
		p, ok2 := sr.uv()
		o, ok3 := sr.uv()
		if !ok1 || !ok2 || !ok3 {
			return idBuf, errStored
		}
		e.topic, e.partition, e.offset = t, int32(uint32(p)), int64(o)
	}
	if e.flags&sHeaders != 0 {
		n, ok := sr.uv()
		if !ok || n == 0 || n > merkle.MaxHeaders {
			return idBuf, errStored
		}
		start := sr.b
		for range n {
			_, ok1 := sr.str()
			_, ok2 := sr.str()
			if !ok1 || !ok2 {
				return idBuf, errStored
			}
		}
		e.nHeaders, e.headers = int(n), start[:len(start)-len(sr.b)]
	}
	if e.flags&sMarks != 0 {
		if len(sr.b) < 1 {
			return idBuf, errStored
		}
		e.marks, sr.b = sr.b[0], sr.b[1:]
	}
	if e.flags&sPruned != 0 && len(sr.b) != merkle.HashSize {
		return idBuf, fmt.Errorf("%w: pruned payload hash of %d bytes", errStored, len(sr.b))
	}
	e.payload = sr.b
	return idBuf, nil
}

// eachHeader calls fn with each header's name and value, in order.
func (e *storedEntry) eachHeader(fn func(k, v []byte)) {
	sr := storedReader{b: e.headers}
	for range e.nHeaders {
		k, _ := sr.str()
		v, _ := sr.str()
		if v == nil {
			v = []byte{}
		}
		fn(k, v)
	}
}

// storedReader reads the fields of a stored entry value in order.
type storedReader struct {
	b []byte
}

// str reads a uvarint-length-prefixed byte string (aliasing the value).
// A length under 128 (one byte: ids, keys, topics, most headers) is read
// inline; longer ones in strLong.
func (sr *storedReader) str() ([]byte, bool) {
	if b := sr.b; len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
		n := int(b[0]) + 1
		sr.b = b[n:]
		return b[1:n:n], true
	}
	return sr.strLong()
}

func (sr *storedReader) strLong() ([]byte, bool) {
	n, k := binary.Uvarint(sr.b)
	if k <= 0 || uint64(len(sr.b)-k) < n {
		return nil, false
	}
	v := sr.b[k : k+int(n)]
	sr.b = sr.b[k+int(n):]
	return v, true
}

func (sr *storedReader) uv() (uint64, bool) {
	v, k := binary.Uvarint(sr.b)
	if k <= 0 {
		return 0, false
	}
	sr.b = sr.b[k:]
	return v, true
}

// recordSlab hands out records, and the payloads and keys they hold, from
// blocks it allocates, so that a scan makes a few objects a block instead
// of two or three an entry (with the garbage collector's scanning of them,
// the larger part of a fold's allocation cost). Nothing it hands out is
// handed out again, but a payload or key a caller keeps keeps its whole
// block alive: it serves scans whose callers keep neither past their
// batch (Entries' and ScanEntries' callers must not keep the record).
// Ids are not in it: a fold keeps each key's last event id. The nil slab
// allocates each one on its own.
type recordSlab struct {
	recs []Record
	buf  []byte
	id   []byte // a packed id's text while one entry is decoded
}

// idScratch returns the buffer a packed id is unpacked into (nil, so
// allocated, when a is nil).
func (a *recordSlab) idScratch() []byte {
	if a == nil {
		return nil
	}
	return a.id[:0]
}

// keepIDScratch keeps b, which idScratch's buffer grew into, for the next
// entry.
func (a *recordSlab) keepIDScratch(b []byte) {
	if a != nil {
		a.id = b
	}
}

const (
	slabRecords = 256
	slabBytes   = 64 << 10
)

func (a *recordSlab) record() *Record {
	if a == nil {
		return &Record{}
	}
	if len(a.recs) == 0 {
		a.recs = make([]Record, slabRecords)
	}
	r := &a.recs[0]
	a.recs = a.recs[1:]
	return r
}

// bytes returns a copy of b (never nil) whose capacity ends with it, so
// that an append to it cannot reach the next one's bytes.
func (a *recordSlab) bytes(b []byte) []byte {
	if a == nil || len(b) == 0 || len(b) > slabBytes/8 {
		return append([]byte{}, b...)
	}
	if len(b) > cap(a.buf)-len(a.buf) {
		a.buf = make([]byte, 0, slabBytes)
	}
	n := len(a.buf)
	a.buf = append(a.buf, b...)
	return a.buf[n:len(a.buf):len(a.buf)]
}

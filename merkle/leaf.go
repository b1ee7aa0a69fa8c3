package merkle

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// LeafVersion is the version byte that starts every leaf this package encodes.
const LeafVersion = 1

// Limits of the leaf encoding.
const (
	MaxLogName = 255     // bytes, 1-byte length prefix
	MaxID      = 1 << 10 // bytes; the encoding allows 65535, auditd accepts 1024
	MaxKey     = 1<<16 - 1
	MaxTopic   = 1<<16 - 1
	// MaxLeafSize bounds the encoding of every leaf auditd ledgers: a C2SP
	// tlog-tiles entry bundle carries each leaf behind a 16-bit length.
	// Leaves ledgered before the bound existed may be longer; they still
	// decode, but no bundle can carry them.
	MaxLeafSize = 1<<16 - 1
)

// Leaf flag bits.
const (
	flagKey          = 1 << 0
	flagTimeAssigned = 1 << 1
	flagSource       = 1 << 2
	flagHeaders      = 1 << 3
	flagMarks        = 1 << 4
	flagsKnown       = flagKey | flagTimeAssigned | flagSource | flagHeaders | flagMarks
)

// Marks record what auditd noticed about an entry's content as it was
// ledgered. They are part of the leaf, so they are committed to.
const (
	// MarkNotJSON: the payload is not a valid JSON value.
	MarkNotJSON = 1 << 0
	// MarkNotUTF8: the payload is not valid UTF-8.
	MarkNotUTF8 = 1 << 1
	// MarkEmpty: the payload is empty.
	MarkEmpty = 1 << 2
	// MarkOversize: the payload exceeded the size limit; only its hash was
	// ledgered.
	MarkOversize = 1 << 3
	// MarkDuplicateID: the producer's event id was already taken by an
	// earlier entry of the log, so the id was derived from the source
	// position instead.
	MarkDuplicateID = 1 << 4
	// MarkKeyOversize: the source record's key exceeded MaxKey, or made the
	// leaf too long (see Fit); the key field holds its SHA-256.
	MarkKeyOversize = 1 << 5
	// MarkHeaderOversize: the source record's headers made the leaf too
	// long (see Fit); every header value over 32 bytes holds its SHA-256.
	MarkHeaderOversize = 1 << 6
	marksKnown         = MarkNotJSON | MarkNotUTF8 | MarkEmpty | MarkOversize | MarkDuplicateID | MarkKeyOversize | MarkHeaderOversize
)

var markNames = []string{"not_json", "not_utf8", "empty", "oversize", "duplicate_id", "key_oversize", "header_oversize"}

// MarkNames returns the names of the mark bits set in m, in bit order.
func MarkNames(m uint8) []string {
	var out []string
	for i, n := range markNames {
		if m&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// ParseMarks turns mark names back into bits.
func ParseMarks(names []string) (uint8, error) {
	var m uint8
next:
	for _, n := range names {
		for i, k := range markNames {
			if n == k {
				m |= 1 << i
				continue next
			}
		}
		return 0, fmt.Errorf("%w: unknown mark %q", ErrLeaf, n)
	}
	return m, nil
}

// Header is one source record header (Kafka record headers). Names may
// repeat; order is kept.
type Header struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// MaxHeaders bounds the headers of one leaf.
const MaxHeaders = 1<<16 - 1

// Source is the position of an entry in the log it was read from.
type Source struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Leaf is what a ledger leaf commits to: the entry header and the SHA-256 of
// the payload. Its encoding is specified in docs/ledger-format.md:
//
//	leaf    = version(1) log id flags [key] time [source] payload_sha256
//	version = 0x01
//	log     = u8 length, bytes (1..255)
//	id      = u16 length, bytes (1..1024)
//	flags   = u8: bit 0 key present, bit 1 time assigned by auditd on arrival,
//	          bit 2 source position present, bit 3 headers present,
//	          bit 4 marks present; other bits zero
//	key     = u16 length, bytes                      (if bit 0)
//	time    = i64 Unix nanoseconds, UTC
//	source  = u16 length, topic bytes; i32 partition; i64 offset   (if bit 2)
//	headers = u16 count, then per header: u16 length, name bytes;
//	          u32 length, value bytes                (if bit 3; count >= 1)
//	marks   = u8, nonzero                            (if bit 4)
//	payload_sha256 = 32 bytes
//
// Integers are big-endian. Strings are UTF-8.
type Leaf struct {
	Log string
	ID  string
	// HasKey distinguishes an empty key from none.
	HasKey bool
	Key    []byte
	// Time is the event time in Unix nanoseconds.
	Time int64
	// TimeAssigned says auditd stamped Time on arrival because the producer
	// gave none.
	TimeAssigned bool
	// Source is the position in the source log, if the entry came from one.
	Source *Source
	// Headers are the source record's headers, in order.
	Headers []Header
	// Marks are Mark* bits.
	Marks         uint8
	PayloadSHA256 Hash
}

// ErrLeaf reports a leaf that does not encode or decode.
var ErrLeaf = errors.New("merkle: malformed leaf")

// Validate checks the leaf's fields against the limits of the encoding.
func (l *Leaf) Validate() error {
	return l.validate(len(l.ID), utf8.ValidString(l.ID))
}

// validate is Validate for an id of idLen bytes, valid UTF-8 if idUTF8.
func (l *Leaf) validate(idLen int, idUTF8 bool) error {
	switch {
	case l.Log == "" || len(l.Log) > MaxLogName:
		return fmt.Errorf("%w: log name of %d bytes (want 1..%d)", ErrLeaf, len(l.Log), MaxLogName)
	case idLen == 0 || idLen > MaxID:
		return fmt.Errorf("%w: id of %d bytes (want 1..%d)", ErrLeaf, idLen, MaxID)
	case !idUTF8 || !utf8.ValidString(l.Log):
		return fmt.Errorf("%w: log name and id must be UTF-8", ErrLeaf)
	case len(l.Key) > MaxKey:
		return fmt.Errorf("%w: key of %d bytes (max %d)", ErrLeaf, len(l.Key), MaxKey)
	case !l.HasKey && len(l.Key) > 0:
		return fmt.Errorf("%w: key bytes without HasKey", ErrLeaf)
	case l.Source != nil && len(l.Source.Topic) > MaxTopic:
		return fmt.Errorf("%w: topic of %d bytes (max %d)", ErrLeaf, len(l.Source.Topic), MaxTopic)
	case len(l.Headers) > MaxHeaders:
		return fmt.Errorf("%w: %d headers (max %d)", ErrLeaf, len(l.Headers), MaxHeaders)
	case l.Marks&^marksKnown != 0:
		return fmt.Errorf("%w: unknown mark bits %#x", ErrLeaf, l.Marks&^marksKnown)
	}
	for _, h := range l.Headers {
		if len(h.Key) > 1<<16-1 || uint64(len(h.Value)) > 1<<32-1 {
			return fmt.Errorf("%w: header %q too long", ErrLeaf, h.Key)
		}
	}
	return nil
}

// Size returns the length of the leaf's encoding.
func (l *Leaf) Size() int {
	n := 1 + 1 + len(l.Log) + 2 + len(l.ID) + 1 + 8 + HashSize
	if l.HasKey {
		n += 2 + len(l.Key)
	}
	if l.Source != nil {
		n += 2 + len(l.Source.Topic) + 4 + 8
	}
	if len(l.Headers) > 0 {
		n += 2
		for _, h := range l.Headers {
			n += 2 + len(h.Key) + 4 + len(h.Value)
		}
	}
	if l.Marks != 0 {
		n++
	}
	return n
}

// fitSize is the leaf's encoded size counted with the longest id (MaxID
// bytes) and a marks byte, so that Fit's outcome does not depend on the id
// or the marks a source may still change (a fallback id, MarkDuplicateID).
func (l *Leaf) fitSize() int {
	n := l.Size() - len(l.ID) + MaxID
	if l.Marks == 0 {
		n++
	}
	return n
}

// Fit shrinks a leaf that could exceed MaxLeafSize, for sources whose
// records must be ledgered whatever their size (Kafka). Counting the id as
// MaxID bytes and a marks byte: if the leaf is over MaxLeafSize, every
// header value longer than HashSize is replaced by its SHA-256
// (MarkHeaderOversize); if it still is, a key longer than HashSize is
// replaced by its SHA-256 (MarkKeyOversize). A leaf that fits is left
// as it is, so leaves within the bound are the same as before Fit existed.
// Fit never modifies the slices it was given. It reports whether the leaf
// now fits; one that does not has too many headers or too long header
// names, and the ledger refuses it.
func (l *Leaf) Fit() bool {
	if l.fitSize() <= MaxLeafSize {
		return true
	}
	hs := make([]Header, len(l.Headers))
	hashed := false
	for i, h := range l.Headers {
		hs[i] = h
		if len(h.Value) > HashSize {
			sum := sha256.Sum256(h.Value)
			hs[i].Value, hashed = sum[:], true
		}
	}
	if hashed {
		l.Headers = hs
		l.Marks |= MarkHeaderOversize
	}
	if l.fitSize() > MaxLeafSize && len(l.Key) > HashSize {
		sum := sha256.Sum256(l.Key)
		l.Key = sum[:]
		l.Marks |= MarkKeyOversize
	}
	return l.fitSize() <= MaxLeafSize
}

// Append appends the leaf's encoding to b. The leaf must be valid.
func (l *Leaf) Append(b []byte) ([]byte, error) {
	if err := l.Validate(); err != nil {
		return b, err
	}
	return appendLeaf(b, l, l.ID), nil
}

// AppendID is Append for the leaf whose id is id (l.ID is not read): a
// scan that hashes stored entries in place takes the id from its buffer
// without making a string of it for each entry.
func (l *Leaf) AppendID(b, id []byte) ([]byte, error) {
	if err := l.validate(len(id), utf8.Valid(id)); err != nil {
		return b, err
	}
	return appendLeaf(b, l, id), nil
}

// appendLeaf appends the encoding of the valid leaf l with the id id.
func appendLeaf[S string | []byte](b []byte, l *Leaf, id S) []byte {
	var flags byte
	if l.HasKey {
		flags |= flagKey
	}
	if l.TimeAssigned {
		flags |= flagTimeAssigned
	}
	if l.Source != nil {
		flags |= flagSource
	}
	if len(l.Headers) > 0 {
		flags |= flagHeaders
	}
	if l.Marks != 0 {
		flags |= flagMarks
	}
	b = append(b, LeafVersion, byte(len(l.Log)))
	b = append(b, l.Log...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	b = append(b, flags)
	if l.HasKey {
		b = binary.BigEndian.AppendUint16(b, uint16(len(l.Key)))
		b = append(b, l.Key...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(l.Time))
	if s := l.Source; s != nil {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s.Topic)))
		b = append(b, s.Topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(s.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(s.Offset))
	}
	if len(l.Headers) > 0 {
		b = binary.BigEndian.AppendUint16(b, uint16(len(l.Headers)))
		for _, h := range l.Headers {
			b = binary.BigEndian.AppendUint16(b, uint16(len(h.Key)))
			b = append(b, h.Key...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(h.Value)))
			b = append(b, h.Value...)
		}
	}
	if l.Marks != 0 {
		b = append(b, l.Marks)
	}
	return append(b, l.PayloadSHA256[:]...)
}

// MarshalBinary returns the leaf's encoding.
func (l *Leaf) MarshalBinary() ([]byte, error) { return l.Append(make([]byte, 0, l.Size())) }

// Hash returns the leaf's RFC 6962 leaf hash.
func (l *Leaf) Hash() (Hash, error) {
	var buf [256]byte
	b, err := l.Append(buf[:0])
	if err != nil {
		return Hash{}, err
	}
	return LeafHash(b), nil
}

// UnmarshalBinary decodes a leaf. It accepts exactly the encodings Append
// produces: unknown versions or flag bits, short or trailing bytes, and fields
// out of range are errors.
func (l *Leaf) UnmarshalBinary(data []byte) error {
	d := leafDecoder{b: data}
	if v := d.u8(); v != LeafVersion {
		if d.err != nil {
			return d.err
		}
		return fmt.Errorf("%w: unknown version %d", ErrLeaf, v)
	}
	var out Leaf
	out.Log = string(d.bytes(int(d.u8())))
	out.ID = string(d.bytes(int(d.u16())))
	flags := d.u8()
	if d.err == nil && flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: unknown flag bits %#x", ErrLeaf, flags&^flagsKnown)
	}
	if flags&flagKey != 0 {
		out.HasKey = true
		out.Key = append([]byte{}, d.bytes(int(d.u16()))...)
	}
	out.Time = int64(d.u64())
	out.TimeAssigned = flags&flagTimeAssigned != 0
	if flags&flagSource != 0 {
		s := &Source{Topic: string(d.bytes(int(d.u16())))}
		s.Partition = int32(d.u32())
		s.Offset = int64(d.u64())
		out.Source = s
	}
	if flags&flagHeaders != 0 {
		n := int(d.u16())
		if d.err == nil && n == 0 {
			return fmt.Errorf("%w: headers flag with no headers", ErrLeaf)
		}
		for i := 0; i < n && d.err == nil; i++ {
			k := string(d.bytes(int(d.u16())))
			v := append([]byte{}, d.bytes(int(d.u32()))...)
			out.Headers = append(out.Headers, Header{Key: k, Value: v})
		}
	}
	if flags&flagMarks != 0 {
		out.Marks = d.u8()
		if d.err == nil && out.Marks == 0 {
			return fmt.Errorf("%w: marks flag with no marks", ErrLeaf)
		}
	}
	copy(out.PayloadSHA256[:], d.bytes(HashSize))
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrLeaf, len(d.b))
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*l = out
	return nil
}

type leafDecoder struct {
	b   []byte
	err error
}

func (d *leafDecoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: truncated", ErrLeaf)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *leafDecoder) u8() byte {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *leafDecoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *leafDecoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *leafDecoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

package rederive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
	"golang.org/x/mod/sumdb/note"
)

// A Snapshot is a derivation's state at pinned prefixes of its source logs
// (each pin a size, its root and the signed checkpoint it was read under),
// bound to the spec's fingerprint, with its own integrity: SHA-256 of the
// canonical encoding of the state (State), named in a note signed by the
// daemon's checkpoint key:
//
//	auditd snapshot/v1
//	<derivation>
//	<fingerprint>
//	<log> <size> <root, base64>     one line per pin, sorted by log
//	<state sha256, hex>
//
// A run that would fold over pruned payloads starts from the newest
// snapshot of its derivation whose fingerprint matches and whose pins
// cover the pruned ranges (docs/derivations.md, "Snapshots").
type Snapshot struct {
	Derivation  string     `json:"derivation"`
	Fingerprint string     `json:"fingerprint"`
	Pins        []fold.Pin `json:"pins"`
	StateSHA256 string     `json:"state_sha256"`
	// Note is the signed note above.
	Note string `json:"note"`
	// State is the canonical encoding of the state (EncodeState).
	State []byte    `json:"state"`
	Saved time.Time `json:"saved"`
}

// ErrSnapshot is wrapped by every refusal of a snapshot that does not
// check out (signature, fingerprint, state hash, pins).
var ErrSnapshot = errors.New("rederive: snapshot refused")

const (
	snapshotHeader = "auditd snapshot/v1"
	stateMagic     = "auditd snapshot state/v1\n"
)

// snapshotText is the text of a snapshot's note.
func snapshotText(name, fp string, pins []fold.Pin, sum string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n%s\n", snapshotHeader, name, fp)
	for _, p := range pins {
		fmt.Fprintf(&b, "%s %d %s\n", p.Log, p.Size, p.Root.String())
	}
	fmt.Fprintf(&b, "%s\n", sum)
	return b.String()
}

// EncodeState is the canonical encoding of r's state: the same result
// always gives the same bytes (keys sorted, each state by d.Encode).
func EncodeState(d fold.Derivation, r *fold.Result) ([]byte, error) {
	pins := make(map[string]uint64, len(r.Pins))
	for i, p := range r.Pins {
		pins[p.Log] = uint64(i)
	}
	errs, err := json.Marshal(r.Errors)
	if err != nil {
		return nil, err
	}
	b := []byte(stateMagic)
	b = binary.AppendUvarint(b, r.Events)
	b = binary.AppendUvarint(b, r.Applied)
	b = binary.AppendUvarint(b, uint64(r.ErrorCount))
	b = appendBytes(b, errs)
	b = binary.AppendUvarint(b, uint64(len(r.States)))
	for _, k := range slices.Sorted(maps.Keys(r.States)) {
		enc, err := d.Encode(r.States[k])
		if err != nil {
			return nil, fmt.Errorf("encode the state of %q: %w", k, err)
		}
		b = appendBytes(b, []byte(k))
		b = appendBytes(b, enc)
		ref, ok := r.Newest[k]
		if !ok {
			b = append(b, 0)
			continue
		}
		pin, ok := pins[ref.Log]
		if !ok {
			return nil, fmt.Errorf("the newest entry of %q is of log %s, which the result does not pin", k, ref.Log)
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, pin)
		b = binary.AppendUvarint(b, ref.Index)
		b = binary.AppendVarint(b, ref.Time.UnixNano())
		b = append(b, ref.LeafHash[:]...)
		b = appendBytes(b, []byte(ref.ID))
	}
	return b, nil
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// stateReader reads EncodeState's fields.
type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("truncated state")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || uint64(len(r.b)) < n {
		r.err = errors.New("truncated state")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// DecodeState decodes EncodeState's bytes into a result at pins.
func DecodeState(d fold.Derivation, fp string, pins []fold.Pin, b []byte) (*fold.Result, error) {
	if !bytes.HasPrefix(b, []byte(stateMagic)) {
		return nil, errors.New("not a snapshot state")
	}
	rd := &stateReader{b: b[len(stateMagic):]}
	res := &fold.Result{Derivation: d.Name(), Fingerprint: fp, Pins: pins}
	res.Events, res.Applied, res.ErrorCount = rd.uvarint(), rd.uvarint(), int(rd.uvarint())
	if errs := rd.bytes(); rd.err == nil {
		if err := json.Unmarshal(errs, &res.Errors); err != nil {
			return nil, fmt.Errorf("errors: %w", err)
		}
	}
	n := rd.uvarint()
	if rd.err == nil && n > uint64(len(rd.b)) {
		return nil, errors.New("key count past the end")
	}
	res.States, res.Newest = make(map[string]fold.State, n), make(map[string]fold.EventRef, n)
	for i := uint64(0); i < n && rd.err == nil; i++ {
		k, enc := string(rd.bytes()), rd.bytes()
		if rd.err != nil || len(rd.b) == 0 {
			break
		}
		st, err := d.Decode(enc)
		if err != nil {
			return nil, fmt.Errorf("state of %q: %w", k, err)
		}
		res.States[k] = st
		flag := rd.b[0]
		rd.b = rd.b[1:]
		if flag == 0 {
			continue
		}
		var ref fold.EventRef
		pin := rd.uvarint()
		if rd.err == nil && pin >= uint64(len(pins)) {
			return nil, fmt.Errorf("key %q: pin %d of %d", k, pin, len(pins))
		}
		ref.Index = rd.uvarint()
		ns, m := binary.Varint(rd.b)
		if rd.err != nil || m <= 0 || len(rd.b)-m < merkle.HashSize {
			return nil, errors.New("truncated state")
		}
		rd.b = rd.b[m:]
		ref.Log, ref.Time = pins[pin].Log, time.Unix(0, ns).UTC()
		copy(ref.LeafHash[:], rd.b)
		rd.b = rd.b[merkle.HashSize:]
		ref.ID = string(rd.bytes())
		res.Newest[k] = ref
	}
	if rd.err != nil {
		return nil, rd.err
	}
	if len(rd.b) != 0 {
		return nil, errors.New("trailing bytes after the state")
	}
	return res, nil
}

// NewSnapshot makes a snapshot of r, signed by signer.
func NewSnapshot(d fold.Derivation, r *fold.Result, signer note.Signer) (*Snapshot, error) {
	state, err := EncodeState(d, r)
	if err != nil {
		return nil, fmt.Errorf("rederive: snapshot %s: %w", d.Name(), err)
	}
	sum := sha256.Sum256(state)
	s := &Snapshot{Derivation: d.Name(), Fingerprint: r.Fingerprint, Pins: slices.Clone(r.Pins),
		StateSHA256: hex.EncodeToString(sum[:]), State: state, Saved: time.Now().UTC()}
	msg, err := note.Sign(&note.Note{Text: snapshotText(s.Derivation, s.Fingerprint, s.Pins, s.StateSHA256)}, signer)
	if err != nil {
		return nil, fmt.Errorf("rederive: snapshot %s: sign: %w", d.Name(), err)
	}
	s.Note = string(msg)
	return s, nil
}

// Open checks s for d of fingerprint fp, its note against verifier, and
// returns its result. Every refusal wraps ErrSnapshot. The pins are not
// checked against the logs here: the runner checks them (each a prefix of
// the log it folds).
func (s *Snapshot) Open(d fold.Derivation, fp string, verifier note.Verifier) (*fold.Result, error) {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrSnapshot, d.Name(), fmt.Sprintf(format, a...))
	}
	if s.Derivation != d.Name() {
		return nil, refuse("it is of derivation %q", s.Derivation)
	}
	if s.Fingerprint != fp {
		return nil, refuse("its fingerprint %s is not the spec's %s", s.Fingerprint, fp)
	}
	if verifier != nil {
		n, err := merkle.OpenNote([]byte(s.Note), note.VerifierList(verifier))
		if err != nil {
			return nil, refuse("its note is not signed by %s: %v", verifier.Name(), err)
		}
		if want := snapshotText(s.Derivation, s.Fingerprint, s.Pins, s.StateSHA256); n.Text != want {
			return nil, refuse("its signed note does not name its header (derivation, fingerprint, pins, state hash)")
		}
	}
	if sum := sha256.Sum256(s.State); hex.EncodeToString(sum[:]) != s.StateSHA256 {
		return nil, refuse("its state hashes to %x, the header says %s", sum, s.StateSHA256)
	}
	if !slices.IsSortedFunc(s.Pins, func(a, b fold.Pin) int { return strings.Compare(a.Log, b.Log) }) {
		return nil, refuse("its pins are not sorted by log")
	}
	r, err := DecodeState(d, fp, s.Pins, s.State)
	if err != nil {
		return nil, refuse("%v", err)
	}
	return r, nil
}

// pin returns s's pin of log, if any.
func (s *Snapshot) pin(log string) (fold.Pin, bool) {
	for _, p := range s.Pins {
		if p.Log == log {
			return p, true
		}
	}
	return fold.Pin{}, false
}

func snapshotKey(name string) []byte { return []byte("snapshot/" + name) }

// SaveSnapshot stores s in b as its derivation's snapshot, replacing the
// one before (only the newest is kept).
func SaveSnapshot(b *ledger.Bucket, s *Snapshot) error {
	v, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("rederive: save the snapshot of %s: %w", s.Derivation, err)
	}
	if err := b.Set(snapshotKey(s.Derivation), v); err != nil {
		return fmt.Errorf("rederive: save the snapshot of %s: %w", s.Derivation, err)
	}
	return nil
}

// LoadSnapshot returns the named derivation's snapshot in b, or an error
// wrapping ledger.ErrNotFound.
func LoadSnapshot(b *ledger.Bucket, name string) (*Snapshot, error) {
	v, err := b.Get(snapshotKey(name))
	if err != nil {
		return nil, fmt.Errorf("rederive: load the snapshot of %s: %w", name, err)
	}
	var s Snapshot
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, fmt.Errorf("rederive: load the snapshot of %s: %w", name, err)
	}
	return &s, nil
}

// Size returns the size at which s pins log (0: not pinned).
func (s *Snapshot) Size(log string) uint64 {
	p, _ := s.pin(log)
	return p.Size
}

// SnapshotSaved makes d's snapshot from its result saved in b (the
// runner's), signed by signer, unless the snapshot in b already pins the
// same prefixes; it returns the snapshot now in b, or nil when there is
// none of fingerprint fp (no saved result of the current spec).
func SnapshotSaved(b *ledger.Bucket, d fold.Derivation, fp string, signer note.Signer) (*Snapshot, error) {
	old, err := LoadSnapshot(b, d.Name())
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return nil, err
	}
	if old != nil && old.Fingerprint != fp {
		old = nil
	}
	// The meta first: a pass whose derivation has not run since the last
	// snapshot reads no state.
	sfp, spins, err := fold.SavedPins(b, d.Name())
	if errors.Is(err, ledger.ErrNotFound) {
		return old, nil
	}
	if err != nil {
		return nil, err
	}
	if sfp != fp || (old != nil && slices.Equal(old.Pins, spins)) {
		return old, nil
	}
	res, err := fold.LoadResult(b, d)
	if errors.Is(err, ledger.ErrNotFound) {
		return old, nil
	}
	if err != nil {
		return nil, err
	}
	if res.Fingerprint != fp || (old != nil && slices.Equal(old.Pins, res.Pins)) {
		return old, nil
	}
	s, err := NewSnapshot(d, res, signer)
	if err != nil {
		return nil, err
	}
	if err := SaveSnapshot(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

package witness

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/auditd/auditd/merkle"
)

// MaxProofLines bounds the consistency proof of an add-checkpoint request
// (c2sp.org/tlog-witness: a proof for trees up to 2^63 has at most 63
// hashes).
const MaxProofLines = 63

// ErrMalformed reports an add-checkpoint request body that does not parse.
var ErrMalformed = errors.New("witness: malformed add-checkpoint request")

// Request is the body of a c2sp.org/tlog-witness add-checkpoint request:
// the size of the checkpoint the witness last cosigned for the log (as far
// as the log knows), a consistency proof from that size to the
// checkpoint's, and the signed checkpoint.
type Request struct {
	OldSize    uint64
	Proof      []merkle.Hash
	Checkpoint []byte // signed note
}

// Marshal returns the request body: "old <size>", one base64 proof hash a
// line, an empty line, then the checkpoint.
func (r *Request) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", r.OldSize)
	for _, h := range r.Proof {
		b.WriteString(h.String() + "\n")
	}
	b.WriteByte('\n')
	b.Write(r.Checkpoint)
	return b.Bytes()
}

// ParseRequest parses an add-checkpoint request body. It checks the form
// only: the checkpoint's signature and the proof are the witness's to
// verify.
func ParseRequest(body []byte) (*Request, error) {
	head, cp, ok := bytes.Cut(body, []byte("\n\n"))
	if !ok {
		return nil, fmt.Errorf("%w: no empty line before the checkpoint", ErrMalformed)
	}
	lines := strings.Split(string(head), "\n")
	size, ok := strings.CutPrefix(lines[0], "old ")
	if !ok {
		return nil, fmt.Errorf("%w: first line is not \"old <size>\"", ErrMalformed)
	}
	old, err := strconv.ParseUint(size, 10, 64)
	if err != nil || strconv.FormatUint(old, 10) != size {
		return nil, fmt.Errorf("%w: old size %q", ErrMalformed, size)
	}
	if len(lines)-1 > MaxProofLines {
		return nil, fmt.Errorf("%w: %d proof lines, at most %d", ErrMalformed, len(lines)-1, MaxProofLines)
	}
	r := &Request{OldSize: old, Checkpoint: cp}
	for _, l := range lines[1:] {
		h, err := merkle.ParseHash(l)
		if err != nil || h.String() != l {
			return nil, fmt.Errorf("%w: proof line %q", ErrMalformed, l)
		}
		r.Proof = append(r.Proof, h)
	}
	if len(cp) == 0 {
		return nil, fmt.Errorf("%w: no checkpoint", ErrMalformed)
	}
	return r, nil
}

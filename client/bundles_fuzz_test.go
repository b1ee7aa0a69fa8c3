package client

import (
	"encoding/binary"
	"testing"
)

// FuzzSplitBundles: the two bundle parsers never panic, accept only
// exactly width entries, and what they accept re-encodes to the input.
func FuzzSplitBundles(f *testing.F) {
	f.Add([]byte{0, 1, 'a', 0, 0}, 2)
	f.Add(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1<<32-1), 1), 2)
	f.Add([]byte{0, 0, 0, 3, 'a', 'b'}, 1)
	f.Fuzz(func(t *testing.T, b []byte, width int) {
		width = width&0xff + 1
		if leaves, err := splitEntryBundle(b, "l", 0, width); err == nil {
			if len(leaves) != width {
				t.Fatalf("%d leaves accepted, want %d", len(leaves), width)
			}
			var out []byte
			for _, l := range leaves {
				out = binary.BigEndian.AppendUint16(out, uint16(len(l)))
				out = append(out, l...)
			}
			if string(out) != string(b) {
				t.Fatalf("entry bundle %x re-encodes to %x", b, out)
			}
		}
		if ps, pruned, err := splitPayloadBundle(b, "l", 0, width); err == nil {
			if len(ps) != width || len(pruned) != width {
				t.Fatalf("%d payloads accepted, want %d", len(ps), width)
			}
			var out []byte
			for i, p := range ps {
				if pruned[i] {
					out = binary.BigEndian.AppendUint32(out, payloadNone)
					continue
				}
				out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
				out = append(out, p...)
			}
			if string(out) != string(b) {
				t.Fatalf("payload bundle %x re-encodes to %x", b, out)
			}
		}
	})
}

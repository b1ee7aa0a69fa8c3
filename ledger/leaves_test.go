package ledger

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/auditd/auditd/merkle"
)

// TestLeaves checks Leaves against Entries, record by record, over ranges
// across the bundle (256) and read batch (1,024) boundaries, and that a
// stored entry that no longer hashes to the tree's leaf stops it with an
// integrity error at that entry.
func TestLeaves(t *testing.T) {
	t.Parallel()
	const n = 1100
	base := newFaultBase(t, n, 300)
	_, l, _ := base.mustFault(t, nil)
	for _, rg := range [][2]uint64{{0, n}, {255, 257}, {1023, 1025}, {1099, 1100}, {7, 7}} {
		var want []*Record
		if err := l.Entries(context.Background(), rg[0], rg[1], func(r *Record) error {
			c := *r
			c.Payload, c.LeafBytes = bytes.Clone(r.Payload), bytes.Clone(r.LeafBytes)
			want = append(want, &c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		i := 0
		err := l.Leaves(context.Background(), rg[0], rg[1], func(index uint64, leaf []byte, hash merkle.Hash, payload []byte, pruned bool) error {
			w := want[i]
			if index != w.Index || hash != w.LeafHash || !bytes.Equal(leaf, w.LeafBytes) || !bytes.Equal(payload, w.Payload) || pruned != w.PayloadPruned {
				t.Errorf("Leaves [%d, %d): entry %d: %d, leaf %x, payload %q, pruned %v; Entries has %d, %x, %q, %v",
					rg[0], rg[1], i, index, leaf, payload, pruned, w.Index, w.LeafBytes, w.Payload, w.PayloadPruned)
			}
			i++
			return nil
		})
		if err != nil || i != len(want) {
			t.Errorf("Leaves [%d, %d): %d entries, %v; want %d", rg[0], rg[1], i, err, len(want))
		}
	}
	if err := l.Leaves(context.Background(), 0, n+1, func(uint64, []byte, merkle.Hash, []byte, bool) error { return nil }); !errors.Is(err, ErrRange) {
		t.Errorf("Leaves past the size: %v, want ErrRange", err)
	}
	stop := errors.New("stop")
	if err := l.Leaves(context.Background(), 0, n, func(uint64, []byte, merkle.Hash, []byte, bool) error { return stop }); err != stop {
		t.Errorf("Leaves with fn failing: %v, want fn's error", err)
	}

	for _, c := range []struct {
		name string
		at   int
		kind string
	}{
		{"payload flipped", -2, IntegrityLeafMismatch},
		{"id flipped", 2, IntegrityLeafMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			const bad = 1024
			_, l, _ := base.mustFault(t, flipByte(entryKey(base.id, bad), c.at))
			seen := 0
			err := l.Leaves(context.Background(), 1000, n, func(uint64, []byte, merkle.Hash, []byte, bool) error { seen++; return nil })
			wantIntegrity(t, "Leaves", err, c.kind, bad)
			if seen != bad-1000 {
				t.Errorf("Leaves handed out %d entries before the damaged one, want %d", seen, bad-1000)
			}
			if err := l.Leaves(context.Background(), 0, bad, func(uint64, []byte, merkle.Hash, []byte, bool) error { return nil }); err != nil {
				t.Errorf("Leaves below the damage: %v", err)
			}
		})
	}
	t.Run("entry undecodable", func(t *testing.T) {
		_, l, _ := base.mustFault(t, setKey(entryKey(base.id, 300), []byte{0xff}))
		err := l.Leaves(context.Background(), 256, 512, func(uint64, []byte, merkle.Hash, []byte, bool) error { return nil })
		wantIntegrity(t, "Leaves", err, IntegrityEntryCorrupt, 300)
	})
	t.Run("entry missing", func(t *testing.T) {
		_, l, _ := base.mustFault(t, deleteKey(entryKey(base.id, 600)))
		err := l.Leaves(context.Background(), 512, 768, func(uint64, []byte, merkle.Hash, []byte, bool) error { return nil })
		wantIntegrity(t, "Leaves", err, IntegrityEntryMissing, 600)
	})
}

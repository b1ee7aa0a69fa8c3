package checkers

import (
	"context"
	"errors"
	"fmt"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// IntegrityPeerRollback is the kind of a finding about a peer that served
// a signed checkpoint smaller than one it served before, or one its
// earlier checkpoint is not a prefix of: a peer that rolled back (a
// restored backup, a replica behind a load balancer) or forked against
// itself, which comparing with our tree alone does not show when ours is
// shorter than both.
const IntegrityPeerRollback = "peer_rollback"

// peerHistoryBucket holds, for each peer and log, the largest signed
// checkpoint the peer served that checked out (the note as served).
const peerHistoryBucket = "peers"

func historyKey(peer Peer, log string) []byte { return []byte(peer.key() + "\x00" + log) }

// checkHistory compares theirs (raw as served, verified) with the largest
// checkpoint the peer served before for log, if one is remembered and
// still verifies with the peer's key and origin (a changed key or origin
// forgets it). A smaller checkpoint, another root at the same size, or a
// larger one the earlier is not a prefix of (the peer's consistency proof
// from the earlier size does not verify) is a finding of kind
// peer_rollback with both notes, the earlier first; rolledBack says so,
// and grew that theirs is larger than the one remembered (or none is), to
// be remembered if it checks out. A proof that cannot be fetched or does
// not decode is an error.
func (c *PeerCheck) checkHistory(ctx context.Context, cl *client.Client, peer Peer, name string,
	theirs *ledger.SignedCheckpoint, raw []byte, p Progress) (grew, rolledBack bool, err error) {
	prevRaw, err := c.history.Get(historyKey(peer, name))
	if errors.Is(err, ledger.ErrNotFound) {
		return true, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("the peer's earlier checkpoint: %w", err)
	}
	prev, bad, err := openPeerCheckpoint(prevRaw, peer.Verifier, peer.Origin(name))
	if err != nil || bad != "" {
		return true, false, nil // not signed by the peer as now configured: forgotten
	}
	found := func(detail string) {
		rolledBack = true
		p.Found(Finding{Log: name, Checkpoint: At(theirs.Size), Kind: IntegrityPeerRollback,
			Detail: fmt.Sprintf("peer %s: its checkpoint of size %d (root %s) %s its earlier checkpoint of size %d (root %s)",
				peer.shown(), theirs.Size, theirs.Root, detail, prev.Size, prev.Root),
			Evidence: []string{string(prevRaw), string(raw)}})
	}
	switch {
	case theirs.Size < prev.Size:
		found("is smaller than")
	case theirs.Size == prev.Size:
		if theirs.Root != prev.Root {
			found("has another root than")
		}
	case prev.Size == 0:
		// The empty tree is a prefix of every tree.
	default:
		proof, err := cl.ConsistencyProof(ctx, name, prev.Size, theirs.Size)
		if err != nil {
			return false, false, fmt.Errorf("peer's consistency proof from its earlier size %d to %d: %w", prev.Size, theirs.Size, err)
		}
		if err := merkle.VerifyConsistency(prev.Size, theirs.Size, proof, prev.Root, theirs.Root); err != nil {
			found(fmt.Sprintf("does not extend (its consistency proof does not verify: %v)", err))
		}
	}
	return theirs.Size > prev.Size && !rolledBack, rolledBack, nil
}

// remember records theirs as the largest checkpoint the peer served for
// log (checkHistory said it grew).
func (c *PeerCheck) remember(peer Peer, name string, raw []byte) error {
	if err := c.history.Set(historyKey(peer, name), raw); err != nil {
		return fmt.Errorf("remember the peer's checkpoint: %w", err)
	}
	return nil
}

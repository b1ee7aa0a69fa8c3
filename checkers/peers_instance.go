package checkers

import (
	"log/slog"
	"net/http"
)

// The headers by which an auditd API server names the instance that
// answered (api.WithInstance sets them on every response): its data
// directory's identity, and its run's.
const (
	InstanceHeader    = "Auditd-Instance"
	InstanceRunHeader = "Auditd-Instance-Run"
)

// Instance identifies a running auditd, so that a peer cross-check can tell
// itself from another instance that signs the same logs with the same key
// (a split brain, which is what the check is for: their checkpoints verify
// with one key and carry one origin, so only this tells them apart).
type Instance struct {
	// ID is the data directory's identity: random, made by the first
	// serve on the directory and kept in it. A copy of the data
	// directory carries it too.
	ID string
	// Run is random for each start of serve: it tells a copy of the data
	// directory serving elsewhere from this process.
	Run string
}

// instanceOf is the instance named by a response's headers, zero when it
// names none (a server that is not auditd, or an older one).
func instanceOf(h http.Header) Instance {
	return Instance{ID: h.Get(InstanceHeader), Run: h.Get(InstanceRunHeader)}
}

// PeerOption configures a PeerCheck.
type PeerOption func(*PeerCheck)

// WithInstance names this instance (what its API answers with, see
// api.WithInstance): a peer that answers with the same identity and run is
// this instance itself, reached through its own URL, and is skipped (result
// self, a warning in the log) instead of compared with itself; one that
// answers with this data directory's identity from another run serves a
// copy of this data directory and is compared as any other. Without it
// every peer is compared.
func WithInstance(self Instance) PeerOption {
	return func(c *PeerCheck) { c.self = self }
}

// WithPeerLogger is where the check writes its warnings (a peer that is
// this instance, or a copy of its data directory); default slog.Default.
func WithPeerLogger(l *slog.Logger) PeerOption {
	return func(c *PeerCheck) { c.log = l }
}

// peerIdentity says what the peer's answer tells of who the peer is: "self"
// when it is this instance, "copy" when it serves this data directory's
// identity from another run, "" otherwise. A change from what it said on the
// last pass is logged as a warning, once.
func (c *PeerCheck) peerIdentity(peer Peer, h http.Header) string {
	theirs, what := instanceOf(h), ""
	if c.self.ID != "" && theirs.ID == c.self.ID {
		what = "copy"
		if theirs.Run == c.self.Run {
			what = "self"
		}
	}
	c.mu.Lock()
	last, seen := c.identities[peer.key()]
	c.identities[peer.key()] = what
	c.mu.Unlock()
	if seen && last == what {
		return what
	}
	switch what {
	case "self":
		c.log.Warn("peer is this instance (it answers with this instance's identity): not compared with itself",
			"checker", c.Name(), "peer", peer.shown(), "instance", c.self.ID)
	case "copy":
		c.log.Warn("peer serves this data directory's identity from another process (a copy of this data directory?): compared as another instance",
			"checker", c.Name(), "peer", peer.shown(), "instance", c.self.ID, "peer_run", theirs.Run)
	}
	return what
}

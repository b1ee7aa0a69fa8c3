// Package interop holds only tests: auditd's C2SP tlog-tiles resources
// (checkpoints, hash tiles, entry bundles) read by other projects' code,
// the client and fsck of github.com/transparency-dev/tessera and the client
// of filippo.io/torchwood, over real HTTP on loopback. Those modules are
// imported by the tests alone, so no auditd binary links them.
package interop

// Package interop holds only tests: auditd's C2SP tlog-tiles resources
// (checkpoints, hash tiles, entry bundles) read by other projects' code,
// the client and fsck of github.com/transparency-dev/tessera and the client
// of filippo.io/torchwood, over real HTTP on loopback; and auditd's
// witnessing (c2sp.org/tlog-witness, tlog-cosignature) against torchwood's
// litewitness, run as a process, and the cosignature verifiers of torchwood
// and github.com/transparency-dev/formats. Those modules are imported (or
// built, as tools) by the tests alone, so no auditd binary links them.
package interop

// Package loadtest holds the pieces auditd-bench's load modes share: event
// generators, latency percentiles, the tracker that times each add to the
// first signed checkpoint covering it, a worker pool with progress, and
// samples of this (or another) process from /proc.
//
// It is for measuring, not for serving: nothing in the shipped auditd
// binary imports it.
package loadtest

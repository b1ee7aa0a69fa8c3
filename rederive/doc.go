// Package rederive re-runs deterministic derivations (the folds behind
// materialized views, balances, counters and caches) over a pinned prefix of
// the ledger, compares the result with the real derived stores, and reports
// drift with the ledger entries, and their inclusion proofs, behind each
// wrong value.
//
// It holds the check: a Runner runs one Job (a derivation and its spec)
// against a Ledger (local or remote) in phases (pin the sources, open the
// store, choose the spans, fold, compare, classify and collect lineage)
// and returns a Report; a Daemon runs the jobs on their schedules;
// WriteTable, WriteJUnit and WriteMarkdown render reports, and
// RaiseReportAlerts turns a report into alerts. Invariants are conditions
// on a derivation's state checked over a fold.Result (CompileInvariants,
// Invariants.CheckResult), a failing key's finding with its lineage
// (AttachInvariantLineage).
//
// The parts live in sub-packages: fold (the engine), spec (YAML specs),
// cel (CEL expressions compiled to a fold.Derivation), store (derived
// store adapters) and compare (expected against actual values).
package rederive

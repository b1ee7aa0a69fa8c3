package fold

import (
	"context"

	"github.com/auditd/auditd/ledger"
)

// LocalLog adapts a log of this process's ledger to a LogReader. It reads
// with ledger.Log.ScanEntries: leaf hashes come from the tree's tiles, and
// leaf bytes and payload hashes are not recomputed. Its Entries may be
// called concurrently, as Fold does.
func LocalLog(l *ledger.Log) LogReader { return localLog{l} }

type localLog struct{ l *ledger.Log }

var _ OwnedRecords = localLog{}

// OwnedRecords is a LogReader whose records' keys and payloads are never
// reused or changed once fn returns (each read allocates them afresh, as
// the local ledger's slabs and a remote reader's response buffers are):
// the fold keeps them as they are. Any other reader's are copied before
// fn returns, a copy of each payload.
type OwnedRecords interface {
	LogReader
	// RecordsOwned marks the reader; it does nothing.
	RecordsOwned()
}

func (localLog) RecordsOwned() {}

func (r localLog) Name() string { return r.l.Name() }

func (r localLog) Entries(ctx context.Context, from, to uint64, fn func(*ledger.Record) error) error {
	return r.l.ScanEntries(ctx, from, to, fn)
}

// Span is the part of one source log a fold reads: the entries [From, To)
// of Reader, pinned at Pin (Pin.Size == To, Pin.Log == Reader.Name()).
//
// Fold and Lineage call the reader's Entries concurrently for disjoint
// ranges of the span, so a LogReader used in a Span must allow that.
type Span struct {
	Reader   LogReader
	From, To uint64
	Pin      Pin
}

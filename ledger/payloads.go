package ledger

import "context"

// Payloads calls fn with the payload of each entry [from, to) in order,
// pruned true (and payload nil) for an entry whose payload the ledger no
// longer holds: pruned after retention, or an oversize payload ledgered by
// its hash alone. Unlike Entries it does not recompute the leaves: the
// payload bundle's reader proves each payload against a leaf it proved
// itself. payload is valid only during the call.
func (l *Log) Payloads(ctx context.Context, from, to uint64, fn func(index uint64, payload []byte, pruned bool) error) error {
	return l.entries(ctx, from, to, false, func(r *Record) error {
		return fn(r.Index, r.Payload, r.PayloadPruned)
	})
}

package ledger

import "fmt"

// Forked puts the log read-only on positive evidence from outside the
// ledger that it published two histories: a witness that holds a larger
// checkpoint of it than the log has signed, or one that cannot verify the
// log's consistency proof or holds another root at the same size; a peer
// whose checkpoint of this log contradicts ours. Whatever the cause (a data
// directory restored from an older copy, a WAL tail lost with the
// checkpoint files, two instances signing with one key), signing on would
// publish more of a history that is already contradicted, so the log signs
// nothing more and refuses appends with ErrReadOnly naming the evidence,
// until an operator recovers it (docs/runbook.md, "Fork evidence").
//
// source names who gave the evidence ("witness w1.example"), detail what
// it is. The failure is recorded like every integrity failure (logged,
// counted, passed to the integrity handler) with kind IntegrityFork. The
// first evidence is the one appends name; later calls are recorded too.
// Forked returns once no checkpoint can be signed any more: a checkpoint
// being signed when it is called is published before it returns, none
// after.
func (l *Log) Forked(source, detail string) *IntegrityError {
	e := l.s.integrity(&IntegrityError{Log: l.name, Index: -1, Kind: IntegrityFork,
		Detail: fmt.Sprintf("%s: %s", source, detail)})
	// Under signMu: sign checks readOnly before it signs, so once this
	// holds the lock no later checkpoint is signed.
	l.signMu.Lock()
	l.setReadOnly(e)
	l.signMu.Unlock()
	// A waiter for a checkpoint that will not come learns why.
	l.cpMu.Lock()
	close(l.cpNext)
	l.cpNext = make(chan struct{})
	l.cpMu.Unlock()
	return e
}

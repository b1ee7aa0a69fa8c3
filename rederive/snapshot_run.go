package rederive

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
	"github.com/auditd/auditd/rederive/fold"
	"golang.org/x/mod/sumdb/note"
)

// ErrPrunedRange is wrapped by the failure of a run that would fold over
// pruned payloads with no snapshot covering them.
var ErrPrunedRange = errors.New("rederive: payloads pruned and no snapshot covers them")

// WithSnapshotVerifier checks the signature of the snapshots the runner
// reads from its bucket with v (without it, only their state hash).
func WithSnapshotVerifier(v note.Verifier) RunnerOption {
	return func(r *Runner) { r.snapVerifier = v }
}

// WithSnapshot has every run of s's derivation start from s (auditd verify
// with a snapshot the daemon published), checked with v: a snapshot that
// does not check out, or whose pins are not prefixes of the logs, fails
// the run.
func WithSnapshot(s *Snapshot, v note.Verifier) RunnerOption {
	return func(r *Runner) { r.snapshot, r.snapVerifier = s, v }
}

// watermarks returns, for each span's log, the index below which its
// payloads are pruned (logs without pruning left out). Only a local
// ledger knows; remotely a fold over a pruned entry fails naming it.
func (r *Runner) watermarks(spans []fold.Span) (map[string]uint64, error) {
	lg, ok := r.ledger.(LocalLedger)
	if !ok {
		return nil, nil
	}
	out := map[string]uint64{}
	for _, s := range spans {
		l, err := lg.Store.Log(s.Pin.Log)
		if err != nil {
			return nil, err
		}
		wm, err := l.PruneWatermark()
		if err != nil {
			return nil, err
		}
		if wm > 0 {
			out[s.Pin.Log] = wm
		}
	}
	return out, nil
}

// covers reports whether folding spans on from base (nil: from zero)
// reads no pruned payload.
func covers(base *fold.Result, spans []fold.Span, pruned map[string]uint64) bool {
	for _, s := range spans {
		wm, ok := pruned[s.Pin.Log]
		if !ok {
			continue
		}
		from := uint64(0)
		if base != nil {
			if p, ok := base.Pin(s.Pin.Log); ok {
				from = p.Size
			}
		}
		if from < min(wm, s.Pin.Size) {
			return false
		}
	}
	return true
}

// fromBase returns spans starting where base's pins end.
func fromBase(base *fold.Result, spans []fold.Span) []fold.Span {
	out := make([]fold.Span, len(spans))
	for i, s := range spans {
		out[i] = s
		if base != nil {
			if p, ok := base.Pin(s.Pin.Log); ok {
				out[i].From = p.Size
			}
		}
	}
	return out
}

// snapshotBase returns the base a fold "from zero" starts from: nil when
// no pruned payload is in the way (and no snapshot was given), else the
// snapshot's result, when its fingerprint matches, its pins are prefixes
// of spans and it covers every pruned range. Without one the failure
// names the first range not covered.
func (r *Runner) snapshotBase(ctx context.Context, d fold.Derivation, spans []fold.Span, fp string, pruned map[string]uint64) (*fold.Result, *runFailure) {
	if r.snapshot == nil && covers(nil, spans, pruned) {
		return nil, nil
	}
	s, why := r.snapshot, ""
	if s == nil && r.bucket != nil {
		var err error
		if s, err = LoadSnapshot(r.bucket, d.Name()); err != nil {
			s = nil
			if !errors.Is(err, ledger.ErrNotFound) {
				why = err.Error()
			}
		}
	}
	var base *fold.Result
	if s != nil {
		res, err := s.Open(d, fp, r.snapVerifier)
		if err == nil && !r.continues(ctx, res, spans, fp) {
			err = fmt.Errorf("%w: the snapshot's pins are not prefixes of the logs' signed checkpoints", ErrSnapshot)
		}
		if err == nil {
			err = r.proveRemotePins(ctx, res, spans)
		}
		switch {
		case err != nil:
			why = err.Error()
		case !covers(res, spans, pruned):
			why = "the snapshot ends before the pruned range"
		default:
			base = res
		}
	}
	if base != nil {
		return base, nil
	}
	if r.snapshot != nil {
		return nil, &runFailure{ErrKindVerification, fmt.Errorf("%w: %s", ErrVerification, why)}
	}
	logs := make([]string, 0, len(pruned))
	for l := range pruned {
		logs = append(logs, l)
	}
	sort.Strings(logs)
	for _, l := range logs {
		for _, sp := range spans {
			if sp.Pin.Log == l {
				to := min(pruned[l], sp.Pin.Size)
				err := fmt.Errorf("%w: derivation %s must fold log %s entries [0, %d), whose payloads are pruned, and no snapshot covers them",
					ErrPrunedRange, d.Name(), l, to)
				if why != "" {
					err = fmt.Errorf("%w (%s)", err, why)
				}
				return nil, &runFailure{ErrKindLedger, err}
			}
		}
	}
	return nil, &runFailure{ErrKindLedger, ErrPrunedRange}
}

// proveRemotePins checks, on a remote ledger, that each of base's pins is
// a prefix of the log's signed checkpoint its span is read under: its root
// equals the one computed from the log's entry and proven consistent with
// the checkpoint. A local ledger's roots are checked by continues.
func (r *Runner) proveRemotePins(ctx context.Context, base *fold.Result, spans []fold.Span) error {
	lg, ok := r.ledger.(*RemoteLedger)
	if !ok {
		return nil
	}
	for _, bp := range base.Pins {
		for _, s := range spans {
			if s.Pin.Log != bp.Log {
				continue
			}
			if err := checkPinCheckpoint(ctx, lg, bp, s.Pin); err != nil {
				return err
			}
			root, err := lg.rootAt(ctx, bp.Log, bp.Size, s.Pin)
			if err != nil {
				return fmt.Errorf("the snapshot's pin of %s at size %d: %w", bp.Log, bp.Size, err)
			}
			if root != bp.Root {
				return fmt.Errorf("the snapshot's pin of %s at size %d has root %s, the log's checkpoint of size %d proves %s",
					bp.Log, bp.Size, bp.Root, s.Pin.Size, root)
			}
		}
	}
	return nil
}

// Snapshot returns the named derivation's snapshot, kept in the runner's
// bucket: ErrUnknownDerivation, or an error wrapping ledger.ErrNotFound
// when it has none.
func (d *Daemon) Snapshot(name string) (*Snapshot, error) {
	if _, ok := d.jobs[name]; !ok {
		return nil, ErrUnknownDerivation
	}
	if d.runner.bucket == nil {
		return nil, fmt.Errorf("rederive: %s keeps no state: %w", name, ledger.ErrNotFound)
	}
	return LoadSnapshot(d.runner.bucket, name)
}

// checkPinCheckpoint checks the signed checkpoint a snapshot's pin names
// (when it names one): signed by the log's key, at least the pin's size,
// of the pin's root at that size, and a prefix of the checkpoint the run
// reads (a consistency proof).
func checkPinCheckpoint(ctx context.Context, lg *RemoteLedger, bp, current fold.Pin) error {
	if bp.Checkpoint == "" {
		return nil
	}
	cp, err := lg.Client.OpenCheckpoint([]byte(bp.Checkpoint), bp.Log)
	if err != nil {
		return fmt.Errorf("the snapshot's checkpoint of %s: %w", bp.Log, err)
	}
	if cp.Size < bp.Size || (cp.Size == bp.Size && cp.Root != bp.Root) {
		return fmt.Errorf("the snapshot's pin of %s (size %d) is not under its checkpoint of size %d", bp.Log, bp.Size, cp.Size)
	}
	cur := merkle.Checkpoint{Origin: cp.Origin, Size: current.Size, Root: current.Root}
	if err := lg.Client.ProveConsistency(ctx, bp.Log, cp, cur); err != nil {
		return fmt.Errorf("the snapshot's checkpoint of %s (size %d) and the log's of size %d: %w", bp.Log, cp.Size, current.Size, err)
	}
	return nil
}

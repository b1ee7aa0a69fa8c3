package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/auditd/auditd/checkers"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// interimScrub stands in for the ledger scrub (checkers.NewScrub) until it
// is merged: it re-reads every entry, recomputes its leaf hash and compares
// it with the level-0 tile hash the tree holds. It checks nothing above the
// leaves. Remove this file when daemonCheckers uses the real checkers.
type interimScrub struct{ store *ledger.Store }

func newInterimScrub(s *ledger.Store) *interimScrub { return &interimScrub{s} }

func (*interimScrub) Name() string { return "scrub" }

func (c *interimScrub) Run(ctx context.Context, p checkers.Progress) error {
	const tile = 256
	for _, li := range c.store.Logs() {
		l, err := c.store.Log(li.Name)
		if err != nil {
			return err
		}
		for from := uint64(0); from < li.Size; from += tile {
			to := min(from+tile, li.Size)
			hashes, err := l.Tile(0, from/tile, int(to-from))
			if err != nil {
				p.Found(checkers.Finding{Log: li.Name, Tile: fmt.Sprintf("0/%d", from/tile), Kind: ledger.IntegrityTileMissing, Detail: err.Error()})
				continue
			}
			err = l.Entries(ctx, from, to, func(r *ledger.Record) error {
				i := r.Index - from
				if want := hashes[i*merkle.HashSize : (i+1)*merkle.HashSize]; !bytes.Equal(r.LeafHash[:], want) {
					p.Found(checkers.Finding{Log: li.Name, Index: checkers.At(r.Index), Kind: ledger.IntegrityLeafMismatch,
						Detail: fmt.Sprintf("entry hashes to leaf %x, the tree holds %x", r.LeafHash[:8], want[:8])})
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("scrub %s [%d, %d): %w", li.Name, from, to, err)
			}
			if err := p.Checked(ctx, int(to-from)); err != nil {
				return err
			}
		}
	}
	return nil
}

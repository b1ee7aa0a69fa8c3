package ledger

import (
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// concatMerger concatenates merge operands, oldest first. Index keys hold a
// list of uvarint leaf indexes; appending one is a Merge, so the append path
// writes index keys without reading them.
var concatMerger = &pebble.Merger{
	Name: "auditd.concat.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		return &concatValue{buf: append([]byte(nil), value...)}, nil
	},
}

type concatValue struct{ buf []byte }

var _ pebble.ValueMerger = (*concatValue)(nil)

func (c *concatValue) MergeNewer(v []byte) error { c.buf = append(c.buf, v...); return nil }

func (c *concatValue) MergeOlder(v []byte) error {
	c.buf = append(append(make([]byte, 0, len(v)+len(c.buf)), v...), c.buf...)
	return nil
}

func (c *concatValue) Finish(bool) ([]byte, io.Closer, error) { return c.buf, nil, nil }

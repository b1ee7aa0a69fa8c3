package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/auditd/auditd/merkle"
)

// ErrNotFound is a 404 from the server: a tile or entry it does not hold.
var ErrNotFound = errors.New("not found")

// TilePath returns the C2SP tlog-tiles path of the tile at level and index
// n, of width hashes: "<L>/<N>[.p/<W>]", N in 3-digit elements, all but
// the last prefixed with "x".
func TilePath(level uint8, n uint64, width int) string {
	var els []string
	for {
		els = append(els, fmt.Sprintf("%03d", n%1000))
		n /= 1000
		if n == 0 {
			break
		}
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(int(level)))
	for i := len(els) - 1; i >= 0; i-- {
		b.WriteByte('/')
		if i > 0 {
			b.WriteByte('x')
		}
		b.WriteString(els[i])
	}
	if width < merkle.TileWidth {
		fmt.Fprintf(&b, ".p/%d", width)
	}
	return b.String()
}

// Tile fetches the first width hashes of the tile at level and index n of
// log. The hashes are as the server sent them, unverified. A tile the
// server does not hold is ErrNotFound.
func (c *Client) Tile(ctx context.Context, log string, level uint8, n uint64, width int) ([]merkle.Hash, error) {
	b, err := c.get(ctx, logPath(log)+"/tile/"+TilePath(level, n, width), nil)
	if err != nil {
		return nil, err // a 404 wraps ErrNotFound
	}
	if len(b) != width*merkle.HashSize {
		return nil, verifyErr("tile %s of %s: %d bytes, want %d", TilePath(level, n, width), log, len(b), width*merkle.HashSize)
	}
	hs := make([]merkle.Hash, width)
	for i := range hs {
		copy(hs[i][:], b[i*merkle.HashSize:])
	}
	return hs, nil
}

// StoredCheckpoint is one checkpoint of a log's history as the server
// lists it: the size it files it under and its signed note, unverified.
type StoredCheckpoint struct {
	Size uint64 `json:"size"`
	Note string `json:"note"`
}

// Checkpoints fetches the log's stored checkpoints with sizes from from
// on, oldest first, at most limit (1..1000) of them.
func (c *Client) Checkpoints(ctx context.Context, log string, from uint64, limit int) ([]StoredCheckpoint, error) {
	b, err := c.get(ctx, logPath(log)+"/checkpoints", url.Values{
		"from": {strconv.FormatUint(from, 10)}, "limit": {strconv.Itoa(limit)}})
	if err != nil {
		return nil, err
	}
	var out []StoredCheckpoint
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	return out, nil
}

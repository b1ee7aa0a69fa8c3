package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"

	"github.com/auditd/auditd/merkle"
)

// payloadNone is the length a payload bundle gives an entry whose payload
// the server does not hold (pruned, or oversize and ledgered by hash).
const payloadNone = 1<<32 - 1

// watermarkHeader carries the log's pruning watermark with a payload
// bundle: no entry at or above it was pruned.
const watermarkHeader = "Auditd-Prune-Watermark"

// ErrNoPayloadBundles reports a server that serves no payload bundles (an
// auditd from before them): read the entries as JSON instead.
var ErrNoPayloadBundles = errors.New("client: the server serves no payload bundles")

// ErrPayloadsTooLarge reports a bundle whose payloads the server will not
// send in one response: read those entries as JSON instead.
var ErrPayloadsTooLarge = errors.New("client: payload bundle too large")

// Bundle is the entries of one 256-entry bundle of a log, proven: each
// leaf hashes to the leaf the tree holds, and each payload to the SHA-256
// its leaf commits to.
type Bundle struct {
	// N is the bundle's index: its entries are N·256 to N·256+len(Leaves)-1.
	N      uint64
	Leaves []merkle.Leaf
	Hashes []merkle.Hash
	// Payloads are the entries' payloads; nil where Pruned.
	Payloads [][]byte
	// Pruned says the server holds no payload for the entry: pruned after
	// retention (below the log's pruning watermark), or oversize (its
	// leaf is marked so). A pruned mark anywhere else fails the bundle.
	Pruned []bool
}

// EntryBundle fetches the C2SP tlog-tiles entry bundle n of width entries
// and splits it into leaves, unverified. A bundle that is not width
// length-prefixed leaves, exactly, is ErrVerification.
func (c *Client) EntryBundle(ctx context.Context, log string, n uint64, width int) ([][]byte, error) {
	b, _, err := c.getHeader(ctx, logPath(log)+"/tile/entries/"+bundlePath(n, width), nil, !c.bundleGzip())
	if err != nil {
		return nil, err
	}
	return splitEntryBundle(b, log, n, width)
}

func splitEntryBundle(b []byte, log string, n uint64, width int) ([][]byte, error) {
	leaves := make([][]byte, 0, width)
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			return nil, verifyErr("entry bundle %d of %s: truncated after %d entries", n, log, len(leaves))
		}
		l := int(binary.BigEndian.Uint16(b))
		leaves = append(leaves, b[2:2+l:2+l])
		b = b[2+l:]
	}
	if len(leaves) != width {
		return nil, verifyErr("entry bundle %d of %s: %d entries, want %d", n, log, len(leaves), width)
	}
	return leaves, nil
}

// PayloadBundle fetches the payload bundle n of width entries: each
// entry's payload (nil with pruned true where the server holds none), and
// the log's pruning watermark the server sent with it. Nothing is
// verified but the format. A server without payload bundles is
// ErrNoPayloadBundles; a bundle it will not send whole,
// ErrPayloadsTooLarge.
func (c *Client) PayloadBundle(ctx context.Context, log string, n uint64, width int) (payloads [][]byte, pruned []bool, watermark uint64, err error) {
	_, payloads, pruned, watermark, err = c.payloadBundle(ctx, log, n, width)
	return payloads, pruned, watermark, err
}

// payloadBundle is PayloadBundle, returning the bundle's bytes too.
func (c *Client) payloadBundle(ctx context.Context, log string, n uint64, width int) (raw []byte, payloads [][]byte, pruned []bool, watermark uint64, err error) {
	b, h, err := c.getHeader(ctx, logPath(log)+"/payloads/"+bundlePath(n, width), nil, !c.bundleGzip())
	if errors.Is(err, ErrNotFound) {
		if h.Get(watermarkHeader) == "" {
			return nil, nil, nil, 0, fmt.Errorf("%w: %w", ErrNoPayloadBundles, err)
		}
		return nil, nil, nil, 0, fmt.Errorf("%w: %w", ErrPayloadsTooLarge, err)
	}
	if err != nil {
		return nil, nil, nil, 0, err
	}
	// Without the header (a proxy that drops it) the watermark is 0: no
	// entry counts as pruned but an oversize one, and a run over a pruned
	// range fails as unverifiable instead of as pruned. Either way it
	// fails; no payload is ever taken unproven.
	if wm := h.Get(watermarkHeader); wm != "" {
		if watermark, err = strconv.ParseUint(wm, 10, 64); err != nil {
			return nil, nil, nil, 0, verifyErr("payload bundle %d of %s: pruning watermark %q", n, log, wm)
		}
	}
	payloads, pruned, err = splitPayloadBundle(b, log, n, width)
	return b, payloads, pruned, watermark, err
}

func splitPayloadBundle(b []byte, log string, n uint64, width int) ([][]byte, []bool, error) {
	payloads := make([][]byte, 0, width)
	pruned := make([]bool, 0, width)
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, nil, verifyErr("payload bundle %d of %s: truncated after %d entries", n, log, len(payloads))
		}
		l := uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
		if l == payloadNone {
			payloads, pruned = append(payloads, nil), append(pruned, true)
			continue
		}
		if uint64(len(b)) < l {
			return nil, nil, verifyErr("payload bundle %d of %s: truncated after %d entries", n, log, len(payloads))
		}
		payloads, pruned = append(payloads, b[:l:l]), append(pruned, false)
		b = b[l:]
	}
	if len(payloads) != width {
		return nil, nil, verifyErr("payload bundle %d of %s: %d entries, want %d", n, log, len(payloads), width)
	}
	return payloads, pruned, nil
}

// WithBundleGzip says whether bundles are fetched gzip-compressed. By
// default they are, but from a server on a loopback address (127.0.0.0/8,
// ::1, localhost), where compressing costs the CPU both sides share and
// saves no network.
func WithBundleGzip(on bool) Option {
	return func(c *Client) {
		c.gzip = -1
		if on {
			c.gzip = 1
		}
	}
}

// bundleGzip reports whether bundles are fetched gzip-compressed.
func (c *Client) bundleGzip() bool {
	if c.gzip != 0 {
		return c.gzip > 0
	}
	u, err := url.Parse(c.base)
	if err != nil {
		return true
	}
	h := u.Hostname()
	if h == "localhost" {
		return false
	}
	ip := net.ParseIP(h)
	return ip == nil || !ip.IsLoopback()
}

// bundlePath is the path of bundle n of width entries: "<N>[.p/<W>]".
func bundlePath(n uint64, width int) string {
	p := TilePath(0, n, width)
	return p[2:] // drop the level "0/"
}

// Bundle returns bundle n of the tree's log, proven: its entry bundle and
// payload bundle are fetched together (or read from the tree's cache, see
// UseCache), each leaf is hashed and the leaves checked against the tree,
// each leaf decoded and each payload checked against its leaf. Any
// mismatch is ErrVerification. The bundle is full but for the last one of
// the tree, which has the entries the tree holds. A server without
// payload bundles is ErrNoPayloadBundles.
func (t *Tree) Bundle(ctx context.Context, n uint64) (*Bundle, error) {
	if n*tileWidth >= t.size {
		return nil, fmt.Errorf("client: bundle %d of %s beyond the tree of size %d", n, t.log, t.size)
	}
	width := int(min(t.size-n*tileWidth, tileWidth))
	if t.cache != nil && width == tileWidth {
		if b := t.cache.read(ctx, t, n); b != nil {
			return b, nil
		}
	}
	if !t.c.noCombined.Load() {
		b, err := t.combinedBundle(ctx, n, width)
		if !errors.Is(err, errNoCombined) {
			return b, err
		}
	}
	return t.splitBundle(ctx, n, width)
}

// Bundles returns the full bundles first to first+count-1 of the tree's
// log, proven as Bundle proves each: from one request for all of them
// (bundles/<N>?count=K) where the server serves combined bundles and no
// cache is in use, else one Bundle each, fetched together.
func (t *Tree) Bundles(ctx context.Context, first uint64, count int) ([]*Bundle, error) {
	if count < 1 || (first+uint64(count))*tileWidth > t.size {
		return nil, fmt.Errorf("client: %d full bundles from %d of %s beyond the tree of size %d", count, first, t.log, t.size)
	}
	if count > 1 && t.cache == nil && !t.c.noCombined.Load() {
		bs, err := t.combinedBundles(ctx, first, count)
		if !errors.Is(err, errNoCombined) {
			return bs, err
		}
	}
	bs := make([]*Bundle, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range bs {
		wg.Go(func() { bs[i], errs[i] = t.Bundle(ctx, first+uint64(i)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, e := range errs {
			if e != nil {
				return nil, e // the first, for errors.Is
			}
		}
	}
	return bs, nil
}

// maxBundleCount is the most bundles the server sends in one response.
const maxBundleCount = 16

// combinedBundles fetches count full combined bundles from first in one
// response (each preceded by its u32 length) and proves each. A 404 is
// errNoCombined, as for combinedBundle.
func (t *Tree) combinedBundles(ctx context.Context, first uint64, count int) ([]*Bundle, error) {
	if count > maxBundleCount {
		return nil, fmt.Errorf("%w: %d bundles in one response", errNoCombined, count)
	}
	q := url.Values{"count": {strconv.Itoa(count)}}
	raw, h, err := t.c.getHeader(ctx, logPath(t.log)+"/bundles/"+bundlePath(first, tileWidth), q, !t.c.bundleGzip())
	if errors.Is(err, ErrNotFound) {
		if h.Get(watermarkHeader) == "" {
			t.c.noCombined.Store(true)
		}
		return nil, fmt.Errorf("%w: %w", errNoCombined, err)
	}
	if err != nil {
		return nil, err
	}
	var watermark uint64
	if wm := h.Get(watermarkHeader); wm != "" {
		if watermark, err = strconv.ParseUint(wm, 10, 64); err != nil {
			return nil, verifyErr("bundles %d to %d of %s: pruning watermark %q", first, first+uint64(count)-1, t.log, wm)
		}
	}
	bs := make([]*Bundle, count)
	for i := range bs {
		n := first + uint64(i)
		if len(raw) < 4 || uint64(len(raw)-4) < uint64(binary.BigEndian.Uint32(raw)) {
			return nil, verifyErr("bundles %d to %d of %s: truncated in bundle %d", first, first+uint64(count)-1, t.log, n)
		}
		l := binary.BigEndian.Uint32(raw)
		one := raw[4 : 4+l : 4+l]
		raw = raw[4+l:]
		leaves, payloads, pruned, err := splitCombined(one, t.log, n, tileWidth)
		if err != nil {
			return nil, err
		}
		if bs[i], err = t.prove(ctx, n, leaves, payloads, pruned, watermark); err != nil {
			return nil, err
		}
	}
	if len(raw) != 0 {
		return nil, verifyErr("bundles %d to %d of %s: %d bytes after the last", first, first+uint64(count)-1, t.log, len(raw))
	}
	return bs, nil
}

// errNoCombined reports a combined bundle the server did not serve: read
// the entry and payload bundles apart.
var errNoCombined = errors.New("client: no combined bundle")

// combinedBundle fetches bundle n of width entries as one combined bundle
// (bundles/<N>[.p/<W>]: u32 length of the entry bundle, the entry bundle,
// the payload bundle) and proves it as Bundle does. A 404 is
// errNoCombined, and one without the pruning watermark header (a server
// from before combined bundles) makes the client stop asking for them.
func (t *Tree) combinedBundle(ctx context.Context, n uint64, width int) (*Bundle, error) {
	raw, h, err := t.c.getHeader(ctx, logPath(t.log)+"/bundles/"+bundlePath(n, width), nil, !t.c.bundleGzip())
	if errors.Is(err, ErrNotFound) {
		if h.Get(watermarkHeader) == "" {
			t.c.noCombined.Store(true)
		}
		return nil, fmt.Errorf("%w: %w", errNoCombined, err)
	}
	if err != nil {
		return nil, err
	}
	var watermark uint64
	if wm := h.Get(watermarkHeader); wm != "" {
		if watermark, err = strconv.ParseUint(wm, 10, 64); err != nil {
			return nil, verifyErr("bundle %d of %s: pruning watermark %q", n, t.log, wm)
		}
	}
	leaves, payloads, pruned, err := splitCombined(raw, t.log, n, width)
	if err != nil {
		return nil, err
	}
	b, err := t.prove(ctx, n, leaves, payloads, pruned, watermark)
	if err != nil {
		return nil, err
	}
	if t.cache != nil && width == tileWidth && !anyTrue(pruned) {
		t.cache.writeFile(t, n, raw)
	}
	return b, nil
}

// splitCombined splits a combined bundle (or a cache file, whose layout is
// the same) into leaves and payloads, unverified.
func splitCombined(b []byte, log string, n uint64, width int) (leaves, payloads [][]byte, pruned []bool, err error) {
	if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) {
		return nil, nil, nil, verifyErr("bundle %d of %s: truncated", n, log)
	}
	l := binary.BigEndian.Uint32(b)
	if leaves, err = splitEntryBundle(b[4:4+l], log, n, width); err != nil {
		return nil, nil, nil, err
	}
	payloads, pruned, err = splitPayloadBundle(b[4+l:], log, n, width)
	return leaves, payloads, pruned, err
}

// splitBundle is Bundle from the entry bundle and the payload bundle,
// fetched apart (together).
func (t *Tree) splitBundle(ctx context.Context, n uint64, width int) (*Bundle, error) {
	var (
		wg               sync.WaitGroup
		rawLeaf, rawPay  []byte
		leaves, payloads [][]byte
		pruned           []bool
		watermark        uint64
		leafErr, payErr  error
	)
	wg.Go(func() {
		rawLeaf, _, leafErr = t.c.getHeader(ctx, logPath(t.log)+"/tile/entries/"+bundlePath(n, width), nil, !t.c.bundleGzip())
		if leafErr == nil {
			leaves, leafErr = splitEntryBundle(rawLeaf, t.log, n, width)
		}
	})
	wg.Go(func() {
		rawPay, payloads, pruned, watermark, payErr = t.c.payloadBundle(ctx, t.log, n, width)
	})
	wg.Wait()
	// The payloads' failure first: a server without payload bundles is
	// told apart from one that lies in its entry bundles.
	if payErr != nil {
		return nil, payErr
	}
	if leafErr != nil {
		return nil, leafErr
	}
	b, err := t.prove(ctx, n, leaves, payloads, pruned, watermark)
	if err != nil {
		return nil, err
	}
	if t.cache != nil && width == tileWidth && !anyTrue(pruned) {
		t.cache.write(t, n, rawLeaf, rawPay)
	}
	return b, nil
}

// prove checks the leaves and payloads of bundle n against the tree and
// returns them as a Bundle.
func (t *Tree) prove(ctx context.Context, n uint64, leaves, payloads [][]byte, pruned []bool, watermark uint64) (*Bundle, error) {
	start := n * tileWidth
	b := &Bundle{N: n, Leaves: make([]merkle.Leaf, len(leaves)), Hashes: make([]merkle.Hash, len(leaves)), Payloads: payloads, Pruned: pruned}
	for i, lb := range leaves {
		b.Hashes[i] = merkle.LeafHash(lb)
	}
	if err := t.Check(ctx, start, b.Hashes); err != nil {
		return nil, err
	}
	for i, lb := range leaves {
		idx := start + uint64(i)
		l := &b.Leaves[i]
		if err := l.UnmarshalBinary(lb); err != nil {
			return nil, verifyErr("entry %d of %s: %v", idx, t.log, err)
		}
		if l.Log != t.log {
			return nil, verifyErr("entry %d of %s: its leaf names log %q", idx, t.log, l.Log)
		}
		if pruned[i] {
			if l.Marks&merkle.MarkOversize == 0 && idx >= watermark {
				return nil, verifyErr("entry %d of %s: payload withheld as pruned, at or above the log's pruning watermark %d", idx, t.log, watermark)
			}
			continue
		}
		if sha256.Sum256(payloads[i]) != l.PayloadSHA256 {
			return nil, verifyErr("entry %d of %s: the payload served does not hash to its leaf's payload_sha256", idx, t.log)
		}
	}
	return b, nil
}

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

package api

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// Combined bundles: bundles/<N>[.p/<W>] is the entry bundle and the
// payload bundle of N in one response, read from the ledger in one pass,
// for a client that reads both (auditd verify --server): half the
// requests, and one read of each entry instead of two. Not part of C2SP
// tlog-tiles; the two bundles in it are byte for byte those served at
// tile/entries/ and payloads/, and are proven the same way.
//
// Format: a big-endian u32 length of the entry bundle, the entry bundle,
// then the payload bundle to the end (the layout of a client's bundle
// cache file). The payload bundle's pruning watermark header, Cache-Control
// (no-cache: pruning changes it) and ETag go with it.
//
// With ?count=K (2 to maxBundleCount), N a full bundle and so the K-1
// after it: the K combined bundles N to N+K-1 in one response, each
// preceded by its u32 length, read in one pass (a reader of 1,024 entries
// makes one request and one ledger scan, not four).

// maxBundleCount bounds the bundles of one combined response.
const maxBundleCount = 16

// leafTooLongError is an entry whose leaf an entry bundle cannot carry.
type leafTooLongError struct {
	index uint64
	size  int
}

func (e *leafTooLongError) Error() string { return errLeafTooLong.Error() }
func (e *leafTooLongError) Unwrap() error { return errLeafTooLong }

// bundleParts reads the width entries from n·256 in one pass and appends
// their entry bundle to leaves and, unless payloads is nil, their payload
// bundle to *payloads. A leaf over merkle.MaxLeafSize is a
// *leafTooLongError; a payload bundle over limit bytes,
// errPayloadsTooLarge.
func bundleParts(ctx context.Context, l *ledger.Log, n uint64, width int, leaves []byte, payloads *[]byte, limit int) ([]byte, error) {
	return bundlePartsTag(ctx, l, n, width, leaves, payloads, limit, nil)
}

// bundlePartsTag is bundleParts that also fills tag, if not nil, with the
// ETag digest of the combined bundle: the SHA-256 of its entries' leaf
// hashes and of which payloads it withholds. A leaf hash commits to the
// leaf's bytes, and the leaf to the payload's (Leaves checks the one
// against the tree, and made the other from the payload), so the digest
// changes whenever the bundle's bytes do, for a fraction of the hashing.
func bundlePartsTag(ctx context.Context, l *ledger.Log, n uint64, width int, leaves []byte, payloads *[]byte, limit int, tag *[sha256.Size]byte) ([]byte, error) {
	from := n * tileWidth
	var digest [1 + tileWidth*merkle.HashSize + tileWidth/8]byte
	digest[0] = 'c'
	hashes, withheld := digest[1:1+tileWidth*merkle.HashSize], digest[1+tileWidth*merkle.HashSize:]
	err := l.Leaves(ctx, from, from+uint64(width), func(index uint64, leaf []byte, hash merkle.Hash, payload []byte, pruned bool) error {
		i := index - from
		copy(hashes[i*merkle.HashSize:], hash[:])
		if pruned {
			withheld[i/8] |= 1 << (i % 8)
		}
		if len(leaf) > merkle.MaxLeafSize {
			return &leafTooLongError{index, len(leaf)}
		}
		if cap(leaves) == 0 {
			leaves = make([]byte, 0, width*(2+len(leaf)))
		}
		leaves = binary.BigEndian.AppendUint16(leaves, uint16(len(leaf)))
		leaves = append(leaves, leaf...)
		if payloads == nil {
			return nil
		}
		p := *payloads
		if pruned {
			*payloads = binary.BigEndian.AppendUint32(p, payloadNone)
			return nil
		}
		if len(p)+4+len(payload)+len(leaves) > limit {
			return errPayloadsTooLarge
		}
		if cap(p) == 0 {
			p = make([]byte, 0, width*(4+len(payload)+len(payload)/4))
		}
		p = binary.BigEndian.AppendUint32(p, uint32(len(payload)))
		*payloads = append(p, payload...)
		return nil
	})
	if err == nil && tag != nil {
		// Width is in the digest: a partial bundle's hashes end early.
		*tag = sha256.Sum256(append(digest[:1+width*merkle.HashSize:1+width*merkle.HashSize], withheld...))
	}
	return leaves, err
}

// writeLeafTooLong answers a bundle that holds a leaf it cannot carry.
func writeLeafTooLong(w http.ResponseWriter, e *leafTooLongError) {
	writeError(w, http.StatusInternalServerError, "leaf_too_long",
		fmt.Sprintf("entry %d has a leaf of %d bytes, over the %d bytes an entry bundle can carry; read it at /entries/%d",
			e.index, e.size, merkle.MaxLeafSize, e.index),
		map[string]any{"index": e.index})
}

// payloadScratch holds the payload bundles of combined bundles while they
// are built, before they are copied behind their entry bundle.
var payloadScratch = sync.Pool{New: func() any { return new([]byte) }}

// getBundle serves bundles/<N>[.p/<W>]: entry bundle and payload bundle N
// in one response, in the format above, gzip-compressed to a client that
// accepts it.
func (s *Server) getBundle(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	p := chi.URLParam(r, "*")
	n, width, perr := parseTileIndex(strings.Split(p, "/"))
	// The watermark is read before the payloads, as for payload bundles,
	// and sent with every answer of this handler: a 404 without it is a
	// server that serves no combined bundles.
	wm, err := l.PruneWatermark()
	if err != nil {
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	w.Header().Set(payloadWatermarkHeader, strconv.FormatUint(wm, 10))
	if perr != nil {
		writeError(w, http.StatusNotFound, "bad_tile_path", fmt.Sprintf("bundle path %s is not <N>[.p/<W>]", echo(p)), nil)
		return
	}
	size := l.Size()
	if n >= size/tileWidth+1 || n*tileWidth+uint64(width) > size {
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "tile_not_found",
			fmt.Sprintf("bundle %d of width %d is beyond the tree of size %d", n, width, size), nil)
		return
	}
	pay := payloadScratch.Get().(*[]byte)
	defer func() {
		if cap(*pay) <= 1<<20 { // not a rare huge bundle's
			payloadScratch.Put(pay)
		}
	}()
	*pay = (*pay)[:0]
	count := 1
	if c := r.URL.Query().Get("count"); c != "" {
		count, err = strconv.Atoi(c)
		if err != nil || count < 1 || count > maxBundleCount || strconv.Itoa(count) != c || (count > 1 && width != tileWidth) {
			writeError(w, http.StatusNotFound, "bad_tile_path",
				fmt.Sprintf("count %s is not 1 to %d, of full bundles", echo(c), maxBundleCount), nil)
			return
		}
		if count > 1 && n+uint64(count) > size/tileWidth {
			w.Header().Set("Cache-Control", cacheMissing)
			writeError(w, http.StatusNotFound, "tile_not_found",
				fmt.Sprintf("bundles %d to %d are not all full in the tree of size %d", n, n+uint64(count)-1, size), nil)
			return
		}
	}
	if count > 1 {
		s.getBundles(w, r, l, n, count)
		return
	}
	var tag [sha256.Size]byte
	b, err := bundlePartsTag(r.Context(), l, n, width, make([]byte, 4, 4+width*(2+128)), pay, maxPayloadBundle-4, &tag)
	var tooLong *leafTooLongError
	switch {
	case errors.As(err, &tooLong):
		w.Header().Set("Cache-Control", cacheMissing)
		writeLeafTooLong(w, tooLong)
		return
	case errors.Is(err, errPayloadsTooLarge):
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "payloads_too_large",
			fmt.Sprintf("bundle %d is over %d bytes; read its entry and payload bundles apart, or its entries at /entries", n, maxPayloadBundle), nil)
		return
	case err != nil:
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	b = append(b, *pay...)
	serveBytesTag(w, r, b, true, cachePayloads, tag[:16])
}

// getBundles serves count full combined bundles from n, each preceded by
// its u32 length, from one ledger pass.
func (s *Server) getBundles(w http.ResponseWriter, r *http.Request, l *ledger.Log, n uint64, count int) {
	pay := payloadScratch.Get().(*[]byte)
	defer func() {
		if cap(*pay) <= 1<<20 {
			payloadScratch.Put(pay)
		}
	}()
	*pay = (*pay)[:0]
	var (
		out   []byte
		start int // of the current bundle in out
		// digest is the current bundle's ETag digest (bundlePartsTag's):
		// 'c', its leaf hashes, the bitmap of withheld payloads.
		digest [1 + tileWidth*merkle.HashSize + tileWidth/8]byte
		tags   = make([]byte, 0, count*sha256.Size)
	)
	hashes, withheld := digest[1:1+tileWidth*merkle.HashSize], digest[1+tileWidth*merkle.HashSize:]
	digest[0] = 'c'
	// finish closes the bundle begun at start: its lengths, its payloads
	// behind its leaves, its digest.
	finish := func() {
		entries := len(out) - start - 8
		binary.BigEndian.PutUint32(out[start:], uint32(4+entries+len(*pay)))
		binary.BigEndian.PutUint32(out[start+4:], uint32(entries))
		out = append(out, *pay...)
		*pay = (*pay)[:0]
		sum := sha256.Sum256(digest[:])
		tags = append(tags, sum[:]...)
		clear(withheld)
	}
	from := n * tileWidth
	err := l.Leaves(r.Context(), from, from+uint64(count)*tileWidth, func(index uint64, leaf []byte, hash merkle.Hash, payload []byte, pruned bool) error {
		i := index % tileWidth
		if i == 0 {
			if index > from {
				finish()
			}
			if out == nil {
				out = make([]byte, 0, count*tileWidth*(2+4+len(leaf)+len(payload)+len(payload)/4))
			}
			start = len(out)
			out = append(out, 0, 0, 0, 0, 0, 0, 0, 0)
		}
		if len(leaf) > merkle.MaxLeafSize {
			return &leafTooLongError{index, len(leaf)}
		}
		copy(hashes[i*merkle.HashSize:], hash[:])
		out = binary.BigEndian.AppendUint16(out, uint16(len(leaf)))
		out = append(out, leaf...)
		if pruned {
			withheld[i/8] |= 1 << (i % 8)
			*pay = binary.BigEndian.AppendUint32(*pay, payloadNone)
			return nil
		}
		if len(out)+len(*pay)+4+len(payload) > maxPayloadBundle {
			return errPayloadsTooLarge
		}
		*pay = binary.BigEndian.AppendUint32(*pay, uint32(len(payload)))
		*pay = append(*pay, payload...)
		return nil
	})
	var tooLong *leafTooLongError
	switch {
	case errors.As(err, &tooLong):
		w.Header().Set("Cache-Control", cacheMissing)
		writeLeafTooLong(w, tooLong)
		return
	case errors.Is(err, errPayloadsTooLarge):
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "payloads_too_large",
			fmt.Sprintf("bundles %d to %d are over %d bytes; read them one by one", n, n+uint64(count)-1, maxPayloadBundle), nil)
		return
	case err != nil:
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	finish()
	sum := sha256.Sum256(tags)
	serveBytesTag(w, r, out, true, cachePayloads, sum[:16])
}

package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Payload bundles: the payloads of the entries of an entry bundle, for
// clients that read every entry of a log (auditd verify --server) without
// the JSON entry listing. The entry bundle (C2SP tlog-tiles, unchanged)
// carries the leaves, which commit to each payload by its SHA-256; the
// payload bundle beside it carries the payloads. A client proves the entry
// bundle against the tree and each payload against its proven leaf.
//
// Format: for each entry of the bundle, in order, a big-endian u32 length
// and the payload's bytes, or the length payloadNone and no bytes for an
// entry whose payload the ledger does not hold (pruned after retention, or
// an oversize payload ledgered by its hash alone).
const payloadNone = 1<<32 - 1

// payloadWatermarkHeader carries the log's pruning watermark with each
// payload bundle: no entry at or above it has been pruned, so a payloadNone
// there is only an oversize payload (its leaf says so), and a client holds
// any other one as a lie.
const payloadWatermarkHeader = "Auditd-Prune-Watermark"

// cachePayloads is the Cache-Control of payload bundles. Unlike entry
// bundles they are not immutable: pruning after retention replaces
// payloads by payloadNone, and a cache must not keep serving what the
// ledger deleted. A cache revalidates with the ETag (a 304 costs no body).
const cachePayloads = "no-cache"

// maxPayloadBundle bounds a payload bundle's bytes (a client reads at most
// 64 MiB per response): a bigger one is a 404 payloads_too_large, with the
// watermark header, and the client reads those entries as JSON.
const maxPayloadBundle = 48 << 20

var errPayloadsTooLarge = errors.New("payload bundle too large")

// getPayloadBundle serves payloads/<N>[.p/<W>]: the payloads of entries
// N·256 to N·256+W-1, in the format above, gzip-compressed to a client
// that accepts it.
func (s *Server) getPayloadBundle(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	p := chi.URLParam(r, "*")
	n, width, err := parseTileIndex(strings.Split(p, "/"))
	if err != nil {
		writeError(w, http.StatusNotFound, "bad_tile_path", fmt.Sprintf("payload bundle path %s is not <N>[.p/<W>]", echo(p)), nil)
		return
	}
	size := l.Size()
	if n >= size/tileWidth+1 || n*tileWidth+uint64(width) > size {
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "tile_not_found",
			fmt.Sprintf("payload bundle %d of width %d is beyond the tree of size %d", n, width, size), nil)
		return
	}
	// The watermark is read before the payloads: pruning only raises it,
	// so every payload missing at or above it is one never stored.
	wm, err := l.PruneWatermark()
	if err != nil {
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	from := n * tileWidth
	var b []byte
	tooLarge := false
	err = l.Payloads(r.Context(), from, from+uint64(width), func(_ uint64, payload []byte, pruned bool) error {
		if b == nil {
			b = make([]byte, 0, width*(4+len(payload)+len(payload)/4))
		}
		if pruned {
			b = binary.BigEndian.AppendUint32(b, payloadNone)
			return nil
		}
		if len(b)+4+len(payload) > maxPayloadBundle {
			tooLarge = true
			return errPayloadsTooLarge
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
		b = append(b, payload...)
		return nil
	})
	w.Header().Set(payloadWatermarkHeader, strconv.FormatUint(wm, 10))
	if tooLarge {
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "payloads_too_large",
			fmt.Sprintf("the payloads of bundle %d are over %d bytes; read its entries at /entries", n, maxPayloadBundle), nil)
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	serveBytes(w, r, b, true, cachePayloads)
}

package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// cacheTile is the Cache-Control of C2SP tlog-tiles hash tiles and entry
// bundles, full and partial alike: the spec calls these endpoints
// immutable, and they are here. A full tile never changes. A partial tile
// of width W (the .p/W path) holds the first W hashes of its tile, and the
// tree only grows: its bytes are the same for every tree size that
// serves it. auditd serves every width up to the tree's size and keeps
// doing so once the tile is full (the spec lets a log delete a partial
// tile then; auditd does not). A tile beyond the tree is a 404 that must
// not be cached: cacheMissing.
const (
	cacheTile    = "public, max-age=31536000, immutable"
	cacheMissing = "no-store"
)

// tileWidth is the number of hashes in a full tile and of entries in a full
// entry bundle.
const tileWidth = merkle.TileWidth

// getTile serves C2SP tlog-tiles hash tiles, tile/<L>/<N>[.p/<W>], and
// entry bundles, tile/entries/<N>[.p/<W>].
func (s *Server) getTile(w http.ResponseWriter, r *http.Request) {
	l, ok := s.logOf(w, r)
	if !ok {
		return
	}
	p := chi.URLParam(r, "*")
	if rest, ok := strings.CutPrefix(p, "entries/"); ok {
		s.getEntryBundle(w, r, l, rest)
		return
	}
	level, n, width, err := parseTilePath(p)
	if err != nil {
		writeError(w, http.StatusNotFound, "bad_tile_path", err.Error(), nil)
		return
	}
	b, err := l.Tile(level, n, width)
	if err != nil {
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	serveTile(w, r, b, false)
}

// errLeafTooLong reports a stored leaf that an entry bundle cannot carry:
// one ledgered before leaves were bounded by merkle.MaxLeafSize.
var errLeafTooLong = errors.New("leaf too long for an entry bundle")

// getEntryBundle serves the entry bundle <N>[.p/<W>]: for each entry, a
// big-endian u16 length and the exact leaf bytes, whose RFC 6962 leaf hash
// is the entry's hash in the level-0 tile. Each leaf is recomputed from the
// stored entry and checked against the tree before it is served.
func (s *Server) getEntryBundle(w http.ResponseWriter, r *http.Request, l *ledger.Log, p string) {
	n, width, err := parseTileIndex(strings.Split(p, "/"))
	if err != nil {
		writeError(w, http.StatusNotFound, "bad_tile_path", fmt.Sprintf("entry bundle path %s is not entries/<N>[.p/<W>]", echo(p)), nil)
		return
	}
	size := l.Size()
	if n >= size/tileWidth+1 || n*tileWidth+uint64(width) > size {
		w.Header().Set("Cache-Control", cacheMissing)
		writeError(w, http.StatusNotFound, "tile_not_found",
			fmt.Sprintf("entry bundle %d of width %d is beyond the tree of size %d", n, width, size), nil)
		return
	}
	b, err := bundleParts(r.Context(), l, n, width, nil, nil, 0)
	var tooLong *leafTooLongError
	if errors.As(err, &tooLong) {
		writeLeafTooLong(w, tooLong)
		return
	}
	if err != nil {
		w.Header().Set("Cache-Control", cacheMissing)
		s.writeErr(w, r, err)
		return
	}
	serveTile(w, r, b, true)
}

// parseTilePath parses "<L>/<N>[.p/<W>]" where N is written in 3-digit
// path elements, all but the last prefixed with "x".
func parseTilePath(p string) (level uint8, n uint64, width int, err error) {
	bad := fmt.Errorf("tile path %s is not <L>/<N>[.p/<W>]", echo(p))
	parts := strings.Split(p, "/")
	if len(parts) < 2 {
		return 0, 0, 0, bad
	}
	lv, err := strconv.ParseUint(parts[0], 10, 8)
	if err != nil || lv > 7 || (len(parts[0]) > 1 && parts[0][0] == '0') {
		return 0, 0, 0, bad
	}
	n, width, err = parseTileIndex(parts[1:])
	if err != nil {
		return 0, 0, 0, bad
	}
	return uint8(lv), n, width, nil
}

var errTileIndex = errors.New("not <N>[.p/<W>]")

// parseTileIndex parses the path elements of "<N>[.p/<W>]", the canonical
// form only: no leading zero elements, W in 1..255 without leading zeros.
func parseTileIndex(rest []string) (n uint64, width int, err error) {
	width = tileWidth
	if len(rest) >= 2 && strings.HasSuffix(rest[len(rest)-2], ".p") {
		wv, err := strconv.Atoi(rest[len(rest)-1])
		if err != nil || wv < 1 || wv > tileWidth-1 || strconv.Itoa(wv) != rest[len(rest)-1] {
			return 0, 0, errTileIndex
		}
		width = wv
		rest = append([]string(nil), rest[:len(rest)-1]...)
		rest[len(rest)-1] = strings.TrimSuffix(rest[len(rest)-1], ".p")
	}
	if len(rest) == 0 || (len(rest) > 1 && rest[0] == "x000") {
		return 0, 0, errTileIndex // N is written without leading zero elements
	}
	for i, el := range rest {
		if i < len(rest)-1 {
			if !strings.HasPrefix(el, "x") {
				return 0, 0, errTileIndex
			}
			el = el[1:]
		}
		if len(el) != 3 || strings.Trim(el, "0123456789") != "" {
			return 0, 0, errTileIndex
		}
		d, _ := strconv.Atoi(el)
		if n > (^uint64(0)-uint64(d))/1000 {
			return 0, 0, errTileIndex
		}
		n = n*1000 + uint64(d)
	}
	return n, width, nil
}

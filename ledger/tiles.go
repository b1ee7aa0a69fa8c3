package ledger

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/auditd/auditd/merkle"
)

// Tiles follow C2SP tlog-tiles: a tile at tile level t holds up to 256
// consecutive hashes of tree level 8t. A stored tile value is those hashes
// followed by the complete hashes of tree level 8t+4 below them (one per 16
// base hashes), so that any node inside a tile is at most 15 hash operations
// away and a proof costs one point read per tile level.
const (
	tileHeight = merkle.TileHeight
	tileWidth  = merkle.TileWidth
	midLevel   = 4
	midStride  = 1 << midLevel
)

// tileBuf is the rightmost, growing tile of one tile level, held in memory by
// the writer.
type tileBuf struct {
	level uint8
	n     uint64 // tile index
	base  []merkle.Hash
	mid   []merkle.Hash
	dirty bool
}

func (t *tileBuf) value() []byte {
	v := make([]byte, 0, (len(t.base)+len(t.mid))*merkle.HashSize)
	for i := range t.base {
		v = append(v, t.base[i][:]...)
	}
	for i := range t.mid {
		v = append(v, t.mid[i][:]...)
	}
	return v
}

// decodeTile splits a stored tile value into its base and mid hashes.
func decodeTile(v []byte) (base, mid []merkle.Hash, err error) {
	w, _, err := tileShape(len(v))
	if err != nil {
		return nil, nil, err
	}
	n := len(v) / merkle.HashSize
	hs := make([]merkle.Hash, n)
	for i := range hs {
		copy(hs[i][:], v[i*merkle.HashSize:])
	}
	return hs[:w], hs[w:], nil
}

// subtreeHash reduces a power-of-two run of hashes to the root of the perfect
// tree over them.
// It overwrites hs.
func subtreeHash(hs []merkle.Hash) merkle.Hash {
	buf := hs
	for n := len(buf); n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			buf[i] = merkle.NodeHash(buf[2*i], buf[2*i+1])
		}
	}
	return buf[0]
}

var (
	errMissingHash = errors.New("ledger: tree hash missing from storage")
	errBadTile     = errors.New("ledger: malformed stored tile")
)

// hashReader reads node hashes from the tiles of one log.
type hashReader struct {
	db    pebble.Reader
	log   uint32
	cache *tileCache // full tiles above level 0; nil for none
}

// tileCache keeps full tiles of tile level 1 and up, expanded into all
// their nodes. Full tiles never change, and there is one level-1 tile per
// 65,536 entries, so a small cache saves all but one point read per proof
// and the hashing of the upper levels.
type tileCache = lru.Cache[tileCacheKey, *expandedTile]

type tileCacheKey struct {
	log uint32
	tileID
}

const tileCacheEntries = 2048 // 16 KB each: at most 32 MB

func newTileCache() *tileCache {
	c, err := lru.New[tileCacheKey, *expandedTile](tileCacheEntries)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	return c
}

var _ merkle.HashReader = hashReader{}

type tileID struct {
	level uint8
	n     uint64
}

// ReadHashes implements merkle.HashReader. Each tile is read once per call,
// and only the hashes a node needs are decoded. Full tiles above level 0
// are expanded once into every node they hold and cached.
func (r hashReader) ReadHashes(ids []merkle.NodeID) ([]merkle.Hash, error) {
	raw := make(map[tileID][]byte, 4)
	out := make([]merkle.Hash, len(ids))
	var run [tileWidth]merkle.Hash
	for i, id := range ids {
		t := uint8(id.Level / tileHeight)
		sub := id.Level % tileHeight
		first := id.Index << sub // first hash at tree level 8t
		tid := tileID{t, first / tileWidth}
		off := int(first % tileWidth)
		cacheable := r.cache != nil && tid.level > 0
		if cacheable {
			if x, ok := r.cache.Get(tileCacheKey{r.log, tid}); ok {
				out[i] = x[sub][off>>sub]
				continue
			}
		}
		v, ok := raw[tid]
		if !ok {
			b, closer, err := r.db.Get(tileKey(r.log, tid.level, tid.n))
			if errors.Is(err, pebble.ErrNotFound) {
				return nil, fmt.Errorf("%w: tile %d/%d for node %d/%d", errMissingHash, tid.level, tid.n, id.Level, id.Index)
			}
			if err != nil {
				return nil, fmt.Errorf("ledger: read tile: %w", err)
			}
			v = append([]byte(nil), b...)
			closer.Close()
			raw[tid] = v
		}
		w, _, err := tileShape(len(v))
		if err != nil {
			return nil, err
		}
		if cacheable && w == tileWidth {
			x := expandTile(v)
			r.cache.Add(tileCacheKey{r.log, tid}, x)
			out[i] = x[sub][off>>sub]
			continue
		}
		start, cnt := off, 1<<sub // in base hashes
		if sub >= midLevel {
			start, cnt = w+off/midStride, 1<<(sub-midLevel)
			if off/midStride+cnt > w/midStride {
				cnt = -1
			}
		} else if off+cnt > w {
			cnt = -1
		}
		if cnt < 0 {
			return nil, fmt.Errorf("%w: node %d/%d beyond tile %d/%d of width %d", errMissingHash, id.Level, id.Index, tid.level, tid.n, w)
		}
		for j := 0; j < cnt; j++ {
			copy(run[j][:], v[(start+j)*merkle.HashSize:])
		}
		out[i] = subtreeHash(run[:cnt])
	}
	return out, nil
}

// expandedTile holds every node of a full tile: level k (0..7) has 256>>k
// hashes.
type expandedTile [tileHeight][]merkle.Hash

// expandTile computes every node of a full stored tile, taking the level-4
// nodes from the tile instead of hashing them again.
func expandTile(v []byte) *expandedTile {
	var x expandedTile
	all := make([]merkle.Hash, 2*tileWidth-2) // 256+128+...+2
	for k, n := 0, tileWidth; k < tileHeight; k, n = k+1, n/2 {
		x[k], all = all[:n:n], all[n:]
	}
	for j := range x[0] {
		copy(x[0][j][:], v[j*merkle.HashSize:])
	}
	for j := range x[midLevel] {
		copy(x[midLevel][j][:], v[(tileWidth+j)*merkle.HashSize:])
	}
	for k := 1; k < tileHeight; k++ {
		if k == midLevel {
			continue
		}
		for j := range x[k] {
			x[k][j] = merkle.NodeHash(x[k-1][2*j], x[k-1][2*j+1])
		}
	}
	return &x
}

// tileShape returns the base and mid hash counts of a tile value of n bytes.
func tileShape(n int) (base, mid int, err error) {
	if n%merkle.HashSize != 0 {
		return 0, 0, fmt.Errorf("%w: %d bytes", errBadTile, n)
	}
	h := n / merkle.HashSize
	w := h - h/(midStride+1)
	if w+w/midStride != h || w > tileWidth {
		return 0, 0, fmt.Errorf("%w: %d hashes", errBadTile, h)
	}
	return w, w / midStride, nil
}

package merkle

// Tile geometry of C2SP tlog-tiles: a tile at tile level t holds up to
// TileWidth consecutive hashes of tree level TileHeight*t, and a full entry
// bundle holds TileWidth entries. Every package that cuts the tree into
// tiles (storage, the API, the client, the scrub) takes them from here.
const (
	TileHeight = 8
	TileWidth  = 1 << TileHeight
)

package api

import (
	"fmt"
	"strings"
	"testing"
)

// tileIndexPath is the canonical C2SP path of tile index n and width w.
func tileIndexPath(n uint64, w int) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n >= 1000 {
		n /= 1000
		s = fmt.Sprintf("x%03d/", n%1000) + s
	}
	if w != tileWidth {
		s += fmt.Sprintf(".p/%d", w)
	}
	return s
}

// FuzzTilePath: whatever parses as a hash tile or entry bundle path is in
// canonical form, the one path of its tile (so no two paths serve one
// resource, and N never wraps around).
func FuzzTilePath(f *testing.F) {
	for _, s := range []string{"0/000", "0/000.p/5", "1/x001/234.p/255", "entries/000", "entries/x018/x446/x744/x073/x709/x551/615",
		"entries/x018/x446/x744/x073/x709/x551/999", "0/x000/000", "entries/001.p/044", "7/x999/999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if rest, ok := strings.CutPrefix(p, "entries/"); ok {
			n, w, err := parseTileIndex(strings.Split(rest, "/"))
			if err == nil && tileIndexPath(n, w) != rest {
				t.Fatalf("bundle path %q parsed as %d width %d, whose path is %q", p, n, w, tileIndexPath(n, w))
			}
			return
		}
		l, n, w, err := parseTilePath(p)
		if err != nil {
			return
		}
		if want := fmt.Sprintf("%d/%s", l, tileIndexPath(n, w)); want != p || w < 1 || w > tileWidth {
			t.Fatalf("tile path %q parsed as %d/%d width %d, whose path is %q", p, l, n, w, want)
		}
	})
}

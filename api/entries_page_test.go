package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/auditd/auditd/api"
)

// TestEntriesPaging: GET /entries?start= pages through a log past the
// 1,000-entry default page and the 10,000-entry cap, following "next" (and
// the Link header, which names the same page) until the last page, which
// has neither; every entry is seen once, in order.
func TestEntriesPaging(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envConfig{opts: api.Options{Limits: api.Limits{CreateLogs: true, MaxEvents: 5000}}})
	const n = 10_500
	for b := 0; b < n; b += 3500 {
		var body strings.Builder
		for i := b; i < b+3500; i++ {
			fmt.Fprintf(&body, `{"id":"e%d","payload":%d}`+"\n", i, i)
		}
		e.post("l", "wait=checkpoint", body.String())
	}
	type page struct {
		Entries []struct {
			Index uint64 `json:"index"`
		} `json:"entries"`
		Next *uint64 `json:"next"`
	}
	walk := func(first string) (pages []int) {
		t.Helper()
		next, seen := first, uint64(0)
		for next != "" {
			var p page
			r := e.getJSON(next, &p)
			link := r.header.Get("Link")
			for _, en := range p.Entries {
				if en.Index != seen {
					t.Fatalf("%s: entry %d, want %d", next, en.Index, seen)
				}
				seen++
			}
			pages = append(pages, len(p.Entries))
			if p.Next == nil {
				if link != "" {
					t.Errorf("%s: last page with Link %q", next, link)
				}
				break
			}
			if *p.Next != seen {
				t.Fatalf("%s: next %d, want %d", next, *p.Next, seen)
			}
			if len(pages) > 20 {
				t.Fatal("no last page")
			}
			target, _, _ := strings.Cut(strings.TrimPrefix(link, "<"), ">")
			if !strings.HasSuffix(link, `>; rel="next"`) || !strings.Contains(target, fmt.Sprintf("start=%d", seen)) {
				t.Fatalf("%s: Link %q for next %d", next, link, seen)
			}
			next = target
		}
		if seen != n {
			t.Errorf("from %s: saw %d entries, want %d", first, seen, n)
		}
		return pages
	}
	// The default page: 1,000 entries at a time.
	if got := walk("/v1/logs/l/entries?start=0"); len(got) != 11 || got[0] != 1000 || got[10] != 500 {
		t.Errorf("default pages %v", got)
	}
	// An end past the 10,000 cap: capped, then the rest up to end.
	if got := walk("/v1/logs/l/entries?start=0&end=20000"); fmt.Sprint(got) != "[10000 500]" {
		t.Errorf("capped pages %v", got)
	}
	// A range that ends inside the log has no next.
	var p page
	if r := e.getJSON("/v1/logs/l/entries?start=10&end=20", &p); len(p.Entries) != 10 || p.Next != nil || r.header.Get("Link") != "" {
		t.Errorf("start=10&end=20: %d entries, next %v, Link %q", len(p.Entries), p.Next, r.header.Get("Link"))
	}
	var raw map[string]json.RawMessage
	e.getJSON("/v1/logs/l/entries?start=10000", &raw)
	if _, ok := raw["next"]; ok {
		t.Errorf("the last page has next: %s", raw["next"])
	}
}

package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
)

// Bodies makes unique ids and payloads across a pool's wrap (n and n+pool
// share a base payload) and across salts, each payload valid JSON of the
// asked size.
func TestBodiesUnique(t *testing.T) {
	const pool, n = 16, 20_000
	a, err := NewBodies(1, 11, 256, pool)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewBodies(1, 12, 256, pool)
	ids, payloads := map[string]bool{}, map[string]bool{}
	for i := range uint64(n) {
		for _, g := range []*Bodies{a, b} {
			id := string(g.AppendID(nil, i))
			if !uuidV4.MatchString(id) {
				t.Fatalf("id %q is not a version 4 UUID", id)
			}
			p := g.AppendPayload(nil, i)
			if len(p) != 256 || !json.Valid(p) {
				t.Fatalf("payload %d: %d bytes, valid %v: %s", i, len(p), json.Valid(p), p)
			}
			if ids[id] || payloads[string(p)] {
				t.Fatalf("event %d repeats an id or a payload", i)
			}
			ids[id], payloads[string(p)] = true, true
		}
	}
	if _, err := NewBodies(1, 1, MinStampedPayload-1, pool); err == nil {
		t.Error("a payload too small for the stamp was accepted")
	}
}

// An NDJSON body holds count events, each {"id","payload"} with the
// event's own id and payload, and appends to what dst holds.
func TestBodiesNDJSON(t *testing.T) {
	g, err := NewBodies(3, 4, 100, 8)
	if err != nil {
		t.Fatal(err)
	}
	body := g.AppendNDJSON([]byte("x"), 1000, 1024)
	if body[0] != 'x' {
		t.Fatal("AppendNDJSON overwrote dst")
	}
	sc := bufio.NewScanner(bytes.NewReader(body[1:]))
	i := uint64(1000)
	for sc.Scan() {
		var ev struct {
			ID      string          `json:"id"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if ev.ID != string(g.AppendID(nil, i)) || !bytes.Equal(ev.Payload, g.AppendPayload(nil, i)) {
			t.Fatalf("line %d is not event %d", i-1000, i)
		}
		i++
	}
	if i != 1000+1024 {
		t.Fatalf("%d events, want 1024", i-1000)
	}
}

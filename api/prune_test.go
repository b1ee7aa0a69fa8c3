package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/auditd/auditd/client"
	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/merkle"
)

// TestPrunedRangeVerifiesWithTlog prunes the payloads of the first 2,000
// of 3,000 entries (past tile and batch boundaries) and checks, with
// golang.org/x/mod/sumdb/tlog and the served tiles alone, that every leaf
// recomputed from the served entry fields is in the tree of the signed
// checkpoint, that the served proofs verify, and that a checkpoint taken
// before pruning is consistent with the tree after.
func TestPrunedRangeVerifiesWithTlog(t *testing.T) {
	t.Parallel()
	const n, cut, early = 3000, 2000, 1000
	env := newTestEnv(t, envConfig{logs: []string{"pr"}})
	ctx := context.Background()
	l, err := env.store.Log("pr")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(env.http.URL, env.verifier)
	var cpEarly merkle.Checkpoint
	for next := 0; next < n; next += 700 {
		var es []ledger.Entry
		for i := next; i < min(next+700, n); i++ {
			es = append(es, ledger.Entry{ID: fmt.Sprintf("e%d", i), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), PayloadJSON: i%2 == 0})
		}
		if _, err := l.Append(ctx, es); err != nil {
			t.Fatal(err)
		}
		if next == 700 {
			if _, err := l.WaitCheckpoint(ctx, early); err != nil {
				t.Fatal(err)
			}
			if cpEarly, _, err = c.Checkpoint(ctx, "pr"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := l.WaitCheckpoint(ctx, n); err != nil {
		t.Fatal(err)
	}
	if res, err := l.PrunePayloads(ctx, ledger.PruneOptions{Before: cut, BatchSize: 1024}); err != nil || res.To != cut {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	cp, _, err := c.Checkpoint(ctx, "pr")
	if err != nil || cp.Size != n {
		t.Fatalf("checkpoint %d, %v; want %d", cp.Size, err, n)
	}
	tree := tlog.Tree{N: int64(cp.Size), Hash: tlog.Hash(cp.Root)}
	hr := tlog.TileHashReader(tree, &tileReader{env: env, log: "pr"})
	if th, err := tlog.TreeHash(tree.N, hr); err != nil || th != tree.Hash {
		t.Fatalf("tlog.TreeHash over the served tiles: %s, %v; want %s", th, err, cp.Root)
	}
	var es []client.Entry
	for len(es) < n {
		page, err := c.Entries(ctx, "pr", uint64(len(es)), n)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, page...)
	}
	for i, e := range es {
		leaf, payload, h, err := e.Decode("pr")
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if e.PayloadPruned != (i < cut) || (payload == nil) != (i < cut) || e.PayloadBase64 != nil && i < cut {
			t.Fatalf("entry %d: payload_pruned %v, payload %q", i, e.PayloadPruned, payload)
		}
		lb, _ := base64.StdEncoding.DecodeString(e.Leaf)
		if tlog.RecordHash(lb) != tlog.Hash(h) || leaf.ID != fmt.Sprintf("e%d", i) {
			t.Fatalf("entry %d: tlog.RecordHash of the served leaf differs from the recomputed %s", i, h)
		}
		if i%97 != 0 && i != 255 && i != 256 && i != 1023 && i != 1024 && i != cut-1 && i != cut && i != n-1 {
			continue
		}
		p, err := tlog.ProveRecord(tree.N, int64(i), hr)
		if err != nil {
			t.Fatalf("tlog.ProveRecord(%d): %v", i, err)
		}
		if err := tlog.CheckRecord(p, tree.N, tree.Hash, int64(i), tlog.Hash(h)); err != nil {
			t.Fatalf("tlog.CheckRecord(%d) with tile hashes: %v", i, err)
		}
		served, err := c.InclusionProof(ctx, "pr", uint64(i), n)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckRecord(toTlog(served), tree.N, tree.Hash, int64(i), tlog.Hash(h)); err != nil {
			t.Fatalf("tlog.CheckRecord(%d) with the served proof: %v", i, err)
		}
	}
	cons, err := c.ConsistencyProof(ctx, "pr", cpEarly.Size, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckTree(toTlog(cons), tree.N, tree.Hash, int64(cpEarly.Size), tlog.Hash(cpEarly.Root)); err != nil {
		t.Fatalf("tlog.CheckTree %d -> %d over the pruned range: %v", cpEarly.Size, n, err)
	}
	// The JSON itself: payload_pruned and the payload hash, no payload.
	var raw map[string]any
	env.getJSON("/v1/logs/pr/entries/5", &raw)
	if raw["payload_pruned"] != true || raw["payload"] != nil || raw["payload_base64"] != nil || raw["payload_sha256"] == nil {
		b, _ := json.Marshal(raw)
		t.Fatalf("GET entry of a pruned entry: %s", b)
	}
	env.get("/v1/logs/pr/entries/2000", http.StatusOK)
}

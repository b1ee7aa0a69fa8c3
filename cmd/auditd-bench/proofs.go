package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/auditd/auditd/internal/loadtest"
	"github.com/auditd/auditd/merkle"
)

// runProofs is the proofs mode: inclusion proofs over HTTP against one log,
// loaded first over HTTP when the server is started here.
func runProofs(args []string) error {
	f, err := parseBenchFlags("proofs", args)
	if err != nil {
		return done(err)
	}
	ctx := context.Background()
	res, err := withServer(ctx, &f, func() (map[string]any, error) { return benchProofs(ctx, f) })
	if err != nil {
		return err
	}
	return writeJSON(f.jsonOut, f.mode, res)
}

// proofsCheckpoint returns the log's verified checkpoint, loading the log
// first when it has none (a server started here begins empty).
func proofsCheckpoint(ctx context.Context, f benchFlags) (merkle.Checkpoint, string, error) {
	v, err := fetchVerifier(ctx, f.server)
	if err != nil {
		return merkle.Checkpoint{}, "", err
	}
	origin := v.Name() + "/" + f.log
	b, err := httpGet(ctx, f.server+"/v1/logs/"+f.log+"/checkpoint")
	if err != nil {
		fmt.Printf("bench: loading %d entries into %s ...\n", f.events, f.log)
		if _, err := benchHTTP(ctx, f); err != nil {
			return merkle.Checkpoint{}, "", err
		}
		if b, err = httpGet(ctx, f.server+"/v1/logs/"+f.log+"/checkpoint"); err != nil {
			return merkle.Checkpoint{}, "", err
		}
	}
	cp, err := merkle.OpenCheckpoint(b, v, origin)
	return cp, origin, err
}

func benchProofs(ctx context.Context, f benchFlags) (map[string]any, error) {
	cp, origin, err := proofsCheckpoint(ctx, f)
	if err != nil {
		return nil, err
	}
	fmt.Printf("proofs: %d inclusion proofs, %d concurrent, against %s at size %d\n", f.requests, f.concurrency, origin, cp.Size)
	var lat loadtest.Latencies
	var verified atomic.Int64
	rngs := make([]*rand.Rand, f.concurrency)
	for c := range rngs {
		rngs[c] = rand.New(rand.NewPCG(uint64(c), 99))
	}
	elapsed, err := loadtest.Drive("proofs", f.concurrency, f.requests, 1, func(c, r int) error {
		idx := rngs[c].Uint64N(cp.Size)
		t0 := time.Now()
		body, err := httpGet(ctx, fmt.Sprintf("%s/v1/logs/%s/proof/inclusion?index=%d&size=%d", f.server, f.log, idx, cp.Size))
		if err != nil {
			return err
		}
		lat.Add(time.Since(t0))
		if r%100 != 0 { // verify one proof in 100, so the client stays light
			return nil
		}
		var p struct {
			LeafHash merkle.Hash   `json:"leaf_hash"`
			Hashes   []merkle.Hash `json:"hashes"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return err
		}
		if err := merkle.VerifyInclusion(idx, cp.Size, p.LeafHash, p.Hashes, cp.Root); err != nil {
			return err
		}
		verified.Add(1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	ms := loadtest.MS
	res := map[string]any{
		"proofs": f.requests, "tree_size": cp.Size, "seconds": elapsed.Seconds(),
		"proofs_per_second": float64(f.requests) / elapsed.Seconds(),
		"p50_ms":            ms(lat.Pct(.5)), "p99_ms": ms(lat.Pct(.99)), "verified": verified.Load(),
	}
	fmt.Printf("proofs: %d in %.2fs = %.0f proofs/s; latency p50 %.2f ms p99 %.2f ms; %d verified client-side\n",
		f.requests, elapsed.Seconds(), res["proofs_per_second"], res["p50_ms"], res["p99_ms"], verified.Load())
	return res, nil
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditd/auditd/ledger"
	"github.com/auditd/auditd/rederive"
	"github.com/auditd/auditd/rederive/spec"
)

// The retention limit of a derivation's source is its snapshot's size of
// the log, made from the derivation's saved state and signed with the
// checkpoint key; without saved state nothing is pruned; a log no
// derivation reads is not bounded.
func TestRetentionLimitSnapshotsDerivation(t *testing.T) {
	dir := t.TempDir()
	pruneStore(t, filepath.Join(dir, "data"), 1500)
	specFile := filepath.Join(dir, "d.yaml")
	storeFile := filepath.Join(dir, "counts.jsonl")
	if err := os.WriteFile(storeFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specFile, []byte(fmt.Sprintf(`derivations:
  - name: order-count
    sources: ["ord*"]
    key: '"all"'
    initial: "0"
    step: state + 1
    store:
      file: {path: %q}
`, storeFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	k, _, err := loadOrCreateKey(filepath.Join(dir, "data", "auditd.key"), "prune.test")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Open(filepath.Join(dir, "data"), k.signer, k.verifier, ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateLog("payments"); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Derivations = []string{specFile}
	jobs, _, err := loadJobs(specFile)
	if err != nil {
		t.Fatal(err)
	}
	d := &instance{cfg: cfg, log: slog.New(slog.DiscardHandler), key: k, store: st, jobs: jobs}
	limit, err := d.snapshotLimit()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := limit("orders"); err != nil || n != 0 {
		t.Errorf("limit of orders before the derivation ran: %d, %v; want 0", n, err)
	}
	if n, err := limit("payments"); err != nil || n != math.MaxUint64 {
		t.Errorf("limit of payments (no derivation reads it): %d, %v; want no bound", n, err)
	}

	specs, err := spec.Load(specFile)
	if err != nil {
		t.Fatal(err)
	}
	dv, err := spec.Compile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	job := rederive.Job{Spec: specs[0], Derivation: dv}
	b, err := st.Bucket("derive")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rederive.NewRunner(rederive.LocalLedger{Store: st}, rederive.WithBucket(b), rederive.WithLogger(d.log)).Run(context.Background(), job, false)
	if err != nil || rep.Events != 1500 {
		t.Fatalf("run: %+v, %v", rep, err)
	}
	if n, err := limit("orders"); err != nil || n != 1500 {
		t.Errorf("limit of orders after the run: %d, %v; want 1500", n, err)
	}
	snap, err := rederive.LoadSnapshot(b, "order-count")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Open(dv, spec.Fingerprint(specs[0]), k.verifier); err != nil {
		t.Errorf("the daemon's snapshot does not open with its verifier key: %v", err)
	}
}

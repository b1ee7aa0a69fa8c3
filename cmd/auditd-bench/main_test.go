package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A usage error exits 2 in every mode; other errors keep 1.
func TestUsageErrorsExit2(t *testing.T) {
	for name, args := range map[string][]string{
		"no mode":       nil,
		"flag, no mode": {"-events", "1"},
		"bad mode":      {"nope"},
		"append flag":   {"append", "--no-such-flag"},
		"append value":  {"append", "-events", "0"},
		"http flag":     {"http", "--no-such-flag"},
		"proofs flag":   {"proofs", "--no-such-flag"},
		"kafka flag":    {"kafka", "--no-such-flag"},
		"derive flag":   {"derive", "--no-such-flag"},
		"verify flag":   {"verify", "--no-such-flag"},
		"logs flag":     {"logs", "--no-such-flag"},
		"logs counts":   {"logs", "-counts", "10,5"},
	} {
		if err := run(args); err == nil || exitStatus(err) != 2 {
			t.Errorf("%s: %v, exit %d; want 2", name, err, exitStatus(err))
		}
	}
	for _, mode := range []string{"append", "http", "proofs", "kafka", "derive", "verify", "logs"} {
		if err := run([]string{mode, "-h"}); err != nil {
			t.Errorf("%s -h: %v", mode, err)
		}
	}
}

// The ledger modes run end to end on a small load, the http and proofs
// modes against the server this binary starts, with a scrub, and write
// their figures as JSON.
func TestLedgerModesSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three small benchmarks")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		keys []string
	}{
		{[]string{"append", "-events", "3000", "-batch", "100", "-logs", "2", "-storage"}, []string{"events_per_second", "checkpoint_p99_ms", "table_bytes"}},
		{[]string{"http", "-events", "3000", "-batch", "100", "-scrub-rate", "0"}, []string{"events_per_second", "checkpoint_p99_ms", "process_cpu_seconds"}},
		{[]string{"proofs", "-events", "2000", "-requests", "500"}, []string{"proofs_per_second", "tree_size", "verified"}},
	} {
		out := filepath.Join(dir, c.args[0]+".json")
		if err := run(append(c.args, "-json", out)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var res map[string]any
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res["mode"] != c.args[0] {
			t.Errorf("%s: mode %v", c.args[0], res["mode"])
		}
		for _, k := range c.keys {
			if _, ok := res[k]; !ok {
				t.Errorf("%s: no %s in %s", c.args[0], k, b)
			}
		}
		if c.args[0] == "proofs" && (res["tree_size"] != 2000.0 || res["verified"] != 5.0) {
			t.Errorf("proofs: tree size %v, %v verified; want 2000 and 5", res["tree_size"], res["verified"])
		}
	}
}

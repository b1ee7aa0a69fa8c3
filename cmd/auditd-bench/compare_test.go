package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets this test binary stand in for auditd-bench as compare's
// decodeonly child: with AUDITD_BENCH_TEST_MAIN set it runs its arguments
// as auditd-bench would.
func TestMain(m *testing.M) {
	if os.Getenv("AUDITD_BENCH_TEST_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestCompareUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"flag":          {"compare", "--no-such-flag"},
		"mode":          {"compare", "-mode", "both"},
		"target":        {"compare", "-targets", "auditd,nginx"},
		"tessera batch": {"compare", "-mode", "batch", "-targets", "auditd,tessera"},
		"twice":         {"compare", "-targets", "auditd,auditd"},
		"ref":           {"compare", "-ref", "kafka"},
		"rounds":        {"compare", "-rounds", "0"},
		"payload":       {"compare", "-payload", "20"},
		"client":        {"compare", "-client", "curl"},
		"missing exe":   {"compare", "-targets", "auditd=/no/such/auditd,decodeonly"},
		"decodeonly":    {"decodeonly", "--no-such-flag"},
	} {
		if err := run(args); err == nil || exitStatus(err) != 2 {
			t.Errorf("%s: %v, exit %d; want 2", name, err, exitStatus(err))
		}
	}
	for _, mode := range []string{"compare", "decodeonly"} {
		if err := run([]string{mode, "-h"}); err != nil {
			t.Errorf("%s -h: %v", mode, err)
		}
	}
}

// buildAuditd builds ./cmd/auditd into a temporary directory.
func buildAuditd(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "auditd")
	cmd := exec.Command("go", "build", "-o", exe, "github.com/auditd/auditd/cmd/auditd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/auditd: %v\n%s", err, out)
	}
	return exe
}

// compare runs the compare mode with args and returns its JSON summary,
// by target.
func compareRun(t *testing.T, args ...string) map[string]targetSummary {
	t.Helper()
	out := filepath.Join(t.TempDir(), "compare.json")
	if err := run(append(append([]string{"compare"}, args...), "-json", out)); err != nil {
		t.Fatalf("compare %v: %v", args, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Mode    string          `json:"mode"`
		Summary []targetSummary `json:"summary"`
		Rounds  []roundResult   `json:"rounds"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Mode != "compare" {
		t.Errorf("mode %q", res.Mode)
	}
	sum := map[string]targetSummary{}
	for _, s := range res.Summary {
		sum[s.Target] = s
	}
	for _, r := range res.Rounds {
		if r.Load1 == "" || r.Errors != 0 {
			t.Errorf("round %d of %s: load %q, %d errors (%s)", r.Round, r.Target, r.Load1, r.Errors, r.FirstError)
		}
	}
	return sum
}

// compare drives real servers as child processes, auditd built from this
// tree, and reports writes, the children's CPU, and auditd's (and
// Tessera's) time to a covering checkpoint.
func TestCompareSmall(t *testing.T) {
	auditd := buildAuditd(t)
	// The decodeonly child is this test binary (see TestMain).
	t.Setenv("AUDITD_BENCH_TEST_MAIN", "1")
	common := []string{"-rounds", "1", "-duration", "1s", "-warmup", "300ms", "-auditd", auditd}
	check := func(sum map[string]targetSummary, target string, checkpoints bool) {
		t.Helper()
		s, ok := sum[target]
		if !ok {
			t.Fatalf("no %s in %v", target, sum)
		}
		if s.Rounds != 1 || s.EventsPerSec <= 0 || s.WritesPerSec <= 0 || s.CPUPerEventUS <= 0 || s.AckP50 <= 0 {
			t.Errorf("%s: %+v; want a round with writes, server CPU and ack latency", target, s)
		}
		if checkpoints != (s.CheckpointP50 > 0 && s.CheckpointP99 >= s.CheckpointP50) {
			t.Errorf("%s: checkpoint p50 %v, p99 %v; want them: %v", target, s.CheckpointP50, s.CheckpointP99, checkpoints)
		}
	}
	sum := compareRun(t, append(common, "-mode", "batch", "-batch", "100", "-concurrency", "2")...)
	check(sum, "auditd", true)
	check(sum, "decodeonly", false)
	if r := sum["decodeonly"].RateRatio; r != 1 {
		t.Errorf("the reference's own ratio is %v", r)
	}
	// The lighter client drives the same servers to the same figures.
	sum = compareRun(t, append(common, "-mode", "single", "-concurrency", "64", "-client", "fasthttp", "-targets", "auditd,decodeonly")...)
	check(sum, "auditd", true)
	check(sum, "decodeonly", false)
	tessera, err := tesseraBinary("")
	if err != nil {
		t.Skipf("single mode against Tessera: %v", err)
	}
	sum = compareRun(t, append(common, "-mode", "single", "-concurrency", "64", "-tessera", tessera)...)
	check(sum, "auditd", true)
	check(sum, "tessera", true)
}

func TestSizeField(t *testing.T) {
	for body, want := range map[string]uint64{`{"size":42,"entries":[]}`: 42, `{"x":1, "size":7}`: 7} {
		if got, err := sizeField([]byte(body)); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", body, got, err, want)
		}
	}
	for _, bad := range []string{`{}`, `{"size":}`, `{"size":-1}`} {
		if _, err := sizeField([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestDecodeNDJSONCounts(t *testing.T) {
	n, err := decodeNDJSON(strings.NewReader("{\"id\":\"a\",\"payload\":{\"x\":1}}\n{\"payload\":[1]}\n"))
	if err != nil || n != 2 {
		t.Fatalf("%d, %v; want 2", n, err)
	}
	for _, bad := range []string{"{\"id\":\"a\"}\n", "{\"payload\":{}\n", "{\"id\":1,\"payload\":2}"} {
		if _, err := decodeNDJSON(strings.NewReader(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// postEvents posts events [from, to) of log, with fixed times so that a
// replay writes the same leaves.
func postEvents(t *testing.T, url, log string, from, to int) {
	t.Helper()
	for lo := from; lo < to; lo += 1000 {
		var b strings.Builder
		for i := lo; i < min(lo+1000, to); i++ {
			fmt.Fprintf(&b, `{"id":"e-%d","key":"k%d","time":"2026-01-02T03:04:05Z","payload":{"n":%d}}`+"\n", i, i%7, i)
		}
		post(t, url+"/v1/logs/"+log+"/entries?wait=checkpoint", b.String())
	}
}

// TestWitnessForkStopsSigning: a daemon's data directory is restored from
// an older copy (on a host without its checkpoint guard: only a witness
// can tell), and the witness, which cosigned the larger checkpoint, answers
// the restored daemon's submission with its size. The daemon puts the log
// read-only at once: appends get 503 read_only naming the witness, no
// checkpoint is signed after, GET /v1/logs/{log} says why, and the alert
// integrity/<log>/fork fires with severity critical.
func TestWitnessForkStopsSigning(t *testing.T) {
	a, w := newWitnessInstance(t), newWitnessInstance(t)
	w.cfg.Witness.Logs = []WitnessedLog{{Origin: a.name + "/payments", VerifierKey: a.vkey}}
	wd := startWith(t, w.cfg)
	a.cfg.Witness.Witnesses = []WitnessEndpoint{{URL: wd.url, VerifierKey: w.wkey}}

	ad := startWith(t, a.cfg)
	postEvents(t, ad.url, "payments", 0, 1100) // past a read batch
	waitCosigned(t, ad.url, "payments", w.wkey)
	ad.stop()
	old := filepath.Join(t.TempDir(), "old")
	if out, err := exec.Command("cp", "-a", a.cfg.DataDir, old).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	ad = startWith(t, a.cfg)
	postEvents(t, ad.url, "payments", 1100, 2300)
	waitCosigned(t, ad.url, "payments", w.wkey)
	ad.stop()

	// The restore, on another host: the old copy, without the guard that
	// remembers the larger checkpoint.
	restored := a.cfg
	restored.DataDir, restored.KeyFile, restored.CheckpointDir = old, filepath.Join(old, "auditd.key"), ""
	restored.CheckpointGuardDir = filepath.Join(t.TempDir(), "new-host-guard")
	rd := startWith(t, restored)
	var info struct {
		Size       uint64 `json:"size"`
		ReadOnly   string `json:"read_only"`
		Checkpoint struct {
			Size uint64 `json:"size"`
		} `json:"checkpoint"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		getJSONURL(t, rd.url+"/v1/logs/payments", &info)
		if info.ReadOnly != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness holds size 2300, the restored log signed %d, and it is still writable", info.Checkpoint.Size)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info.Checkpoint.Size != 1100 || !strings.Contains(info.ReadOnly, "fork") || !strings.Contains(info.ReadOnly, w.name+"/witness") {
		t.Errorf("GET /v1/logs/payments: checkpoint %d, read_only %q: want 1100 and the witness's evidence", info.Checkpoint.Size, info.ReadOnly)
	}
	resp, err := http.Post(rd.url+"/v1/logs/payments/entries", "application/x-ndjson", strings.NewReader(`{"id":"after","payload":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != "read_only" || !strings.Contains(string(body), "witness") {
		t.Errorf("POST after the fork: %d %s, want 503 read_only naming the witness", resp.StatusCode, body)
	}
	var al struct {
		State  string            `json:"state"`
		Labels map[string]string `json:"labels"`
	}
	waitUntil(t, "the alert integrity/payments/fork", func() bool {
		getJSONURL(t, rd.url+"/v1/alerts/integrity/payments/fork", &al)
		return al.State == "firing"
	})
	if al.Labels["severity"] != "critical" {
		t.Errorf("fork alert labels %v, want severity critical", al.Labels)
	}
	time.Sleep(200 * time.Millisecond) // checkpoint interval 10ms: any signing would show
	getJSONURL(t, rd.url+"/v1/logs/payments", &info)
	if info.Checkpoint.Size != 1100 {
		t.Errorf("checkpoint %d signed after the fork", info.Checkpoint.Size)
	}
}

// getJSONURL GETs url into v; a non-200 leaves v as it is.
func getJSONURL(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
